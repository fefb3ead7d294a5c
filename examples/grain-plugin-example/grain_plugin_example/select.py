"""A transformation keeping some keys of dict elements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grain_core as grain
from grain_core.author import OneParentMapDataset


class SelectFieldsMapDataset(OneParentMapDataset):
    """``{k: parent[i][k] for k in fields}``; a missing key raises ``KeyError`` naming the index."""

    def __init__(self, parent: grain.MapDataset, fields: Sequence[str]):
        super().__init__(parent)
        if isinstance(fields, str):
            fields = [fields]
        self.fields = tuple(fields)

    def _select(self, index: int, x: Any) -> Any:
        if x is None:
            return None
        try:
            return {k: x[k] for k in self.fields}
        except KeyError as e:
            raise KeyError(f"element {index} has no field {e.args[0]!r}; it has {sorted(x)}") from None

    def element_at(self, index: int) -> Any:
        return self._select(index, self.parent.element_at(index))

    def __getitems__(self, indices):
        return [self._select(int(i), x) for i, x in zip(indices, self.parent.__getitems__(indices))]

    def fingerprint_fields(self) -> dict[str, Any]:
        return {"fields": self.fields}

    def __str__(self) -> str:
        return f"SelectFieldsMapDataset({list(self.fields)})"
