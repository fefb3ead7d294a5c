"""Checkpointing ``DatasetIterator`` state: JSON files per JAX process, with Orbax integration.

``save_iterator_state`` / ``load_iterator_state`` (and ``DatasetIterator.save`` / ``load``) work
without Orbax or JAX. ``CheckpointSave``, ``CheckpointRestore`` and ``CheckpointHandler`` need
``orbax-checkpoint`` and are imported from it only when first used::

    mngr = ocp.CheckpointManager(directory)
    mngr.save(step, args=grain.checkpoint.CheckpointSave(it), force=True)
    mngr.restore(step, args=grain.checkpoint.CheckpointRestore(it))

See ``docs/checkpointing.md``.
"""

from __future__ import annotations

from typing import Any

from grain_core.checkpoint.errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    CheckpointPipelineMismatchError,
    CheckpointProcessCountError,
)
from grain_core.checkpoint.files import (
    FORMAT_NAME,
    FORMAT_VERSION,
    decode_state,
    encode_state,
    load_iterator_state,
    process_info,
    read_state_file,
    restore_iterator,
    save_iterator_state,
    state_file_name,
    write_state_file,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointFormatError",
    "CheckpointHandler",
    "CheckpointNotFoundError",
    "CheckpointPipelineMismatchError",
    "CheckpointProcessCountError",
    "CheckpointRestore",
    "CheckpointSave",
    "decode_state",
    "encode_state",
    "load_iterator_state",
    "process_info",
    "read_state_file",
    "restore_iterator",
    "save_iterator_state",
    "state_file_name",
    "write_state_file",
]

_ORBAX_NAMES = ("CheckpointHandler", "CheckpointSave", "CheckpointRestore")


def __getattr__(name: str) -> Any:
    if name in _ORBAX_NAMES:
        try:
            from grain_core.checkpoint import orbax_handler
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"grain_core.checkpoint.{name} needs orbax-checkpoint: pip install "
                f"'grain-core-kernel[orbax]' (or orbax-checkpoint). ({e})"
            ) from e
        return getattr(orbax_handler, name)
    raise AttributeError(f"module 'grain_core.checkpoint' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ORBAX_NAMES))
