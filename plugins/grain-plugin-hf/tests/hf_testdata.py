"""Test data shared by the test modules (a module of its own: ``conftest`` names clash when
several test folders run together)."""

from __future__ import annotations

import numpy as np


def table_dict(n: int, start: int = 0) -> dict:
    """``n`` rows of (text, variable-length int list, small float array, label)."""
    ids = np.arange(start, start + n)
    return {
        "text": [f"row {i}" for i in ids],
        "tokens": [list(range(i % 5)) for i in ids],
        "vec": [[float(i), i / 2, -float(i)] for i in ids],
        "label": [int(i) for i in ids],
    }
