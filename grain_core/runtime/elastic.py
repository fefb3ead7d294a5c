"""Elastic restore's old home: everything is :mod:`grain_core.dataset.elastic` now (it reads
dataset trees and states only, so it lives in the dataset kernel, where the runtime and the
checkpoint files both reach it). Kept so that ``grain_core.runtime.elastic`` keeps working.
"""

from __future__ import annotations

from grain_core.dataset.elastic import *  # noqa: F403
from grain_core.dataset.elastic import __all__  # noqa: F401
