"""``grain.python`` compatibility: the same names as the ``grain_core`` top level."""

from __future__ import annotations

import grain_core as _top
from grain_core import *  # noqa: F403
from grain_core import experimental, sources, transforms  # noqa: F401


def __getattr__(name: str):
    return getattr(_top, name)


def __dir__() -> list[str]:
    return dir(_top)
