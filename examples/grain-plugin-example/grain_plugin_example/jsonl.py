"""Random access to JSON Lines files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def write_jsonl(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> int:
    """Writes ``records`` to ``path``, one JSON object per line; returns how many."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
            n += 1
    return n


def _line_offsets(path: str) -> np.ndarray:
    offsets = []
    pos = 0
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                offsets.append(pos)
            pos += len(line)
    return np.asarray(offsets, dtype=np.int64)


class JsonlDataSource:
    """The records of one or more JSON Lines files, in file order, as dicts.

    Opening builds an index of line offsets (one pass over each file). Files are opened lazily per
    process, so the source pickles as its paths and index and works in ``mp_prefetch`` workers.
    Blank lines are skipped.
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike]):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self._paths = [os.fspath(p) for p in paths]
        if not self._paths:
            raise ValueError("JsonlDataSource needs at least one path.")
        self._offsets = [_line_offsets(p) for p in self._paths]
        self._starts = np.cumsum([0] + [len(o) for o in self._offsets])
        self._files: dict[int, Any] = {}

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _locate(self, index: int) -> tuple[int, int]:
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} out of range for {len(self)} records.")
        f = int(np.searchsorted(self._starts, index, side="right") - 1)
        return f, index - int(self._starts[f])

    def _file(self, f: int):
        fh = self._files.get(f)
        if fh is None:
            fh = self._files[f] = open(self._paths[f], "rb")  # noqa: SIM115  closed in __del__
        return fh

    def _read(self, f: int, line: int) -> dict[str, Any]:
        fh = self._file(f)
        fh.seek(int(self._offsets[f][line]))
        return json.loads(fh.readline())

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self._read(*self._locate(index))

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        located = [self._locate(i) for i in indices]
        out: list[Any] = [None] * len(located)
        # Read in file-offset order (sequential I/O), return in the order asked.
        for pos in sorted(range(len(located)), key=lambda k: located[k]):
            out[pos] = self._read(*located[pos])
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_files"] = {}
        return state

    def __del__(self):
        for fh in getattr(self, "_files", {}).values():
            try:
                fh.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"JsonlDataSource({len(self._paths)} files, {len(self)} records)"
