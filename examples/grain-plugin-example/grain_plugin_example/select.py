"""A transformation keeping some keys of dict elements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grain_core as grain


class SelectFieldsMapDataset(grain.MapDataset):
    """``{k: parent[i][k] for k in fields}``; a missing key raises ``KeyError`` naming the index."""

    def __init__(self, parent: grain.MapDataset, fields: Sequence[str]):
        super().__init__(parent)
        if isinstance(fields, str):
            fields = [fields]
        self._parent = parent
        self.fields = tuple(fields)

    def __len__(self) -> int:
        return len(self._parent)

    def _select(self, index: int, x: Any) -> Any:
        if x is None:
            return None
        try:
            return {k: x[k] for k in self.fields}
        except KeyError as e:
            raise KeyError(f"element {index} has no field {e.args[0]!r}; it has {sorted(x)}") from None

    def _getitem(self, index: int) -> Any:
        return self._select(index, self._parent[index])

    def __getitems__(self, indices):
        return [self._select(int(i), x) for i, x in zip(indices, self._parent.__getitems__(indices))]

    def _fingerprint_fields(self) -> tuple:
        return self.fields

    def __str__(self) -> str:
        return f"SelectFieldsMapDataset({list(self.fields)})"
