"""The CPU-bound ``DataLoader`` row's operation, in a module worker processes can import by name."""

from __future__ import annotations

from cpu_work import heavy

import grain_core


class HeavyMap(grain_core.transforms.Map):
    """:func:`cpu_work.heavy` as a ``DataLoader`` ``Map`` operation."""

    def map(self, element: int) -> float:
        return heavy(element)
