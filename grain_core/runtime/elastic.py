"""Elastic restore's old home: everything is :mod:`grain_core.dataset.elastic` now (it reads
dataset trees and states only, so it lives in the dataset kernel, where the runtime and the
checkpoint files both reach it). ``grain_core.runtime.elastic`` stays that very module: importing
this name gives :mod:`grain_core.dataset.elastic` itself, every name of it included.
"""

from __future__ import annotations

import sys

from grain_core.dataset import elastic as _elastic
from grain_core.dataset.elastic import *  # noqa: F403  (the names type checkers see here)
from grain_core.dataset.elastic import LEAF_KIND, MP_KIND, __all__  # noqa: F401

sys.modules[__name__] = _elastic
