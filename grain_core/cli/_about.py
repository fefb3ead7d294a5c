"""The kernel's distribution name and installed version, for ``--version`` and provider columns."""

from __future__ import annotations

import importlib.metadata

import grain_core

__all__ = ["KERNEL_DISTRIBUTION", "kernel_version"]

# The import name is ``grain_core``; the distribution is ``grain-core-kernel`` ("grain-core" on the
# package index is an unrelated project).
KERNEL_DISTRIBUTION = "grain-core-kernel"


def kernel_version() -> str:
    """The installed distribution's version; the package's own ``__version__`` when run from a
    source tree that is not installed."""
    try:
        return importlib.metadata.version(KERNEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return grain_core.__version__
