"""``grain.python.experimental``: the same names as :mod:`grain_core.experimental`."""

from __future__ import annotations

from typing import Any

from grain_core import experimental as _experimental
from grain_core.experimental import *  # noqa: F403
from grain_core.experimental import __all__  # noqa: F401


def __getattr__(name: str) -> Any:
    return getattr(_experimental, name)


def __dir__() -> list[str]:
    return dir(_experimental)
