"""Orbax integration: ``CheckpointSave`` / ``CheckpointRestore`` args and their handler.

Registered with ``orbax.checkpoint.args.register_with_handler``, so a ``CheckpointManager`` (alone
or inside ``ocp.args.Composite`` beside model state) finds :class:`CheckpointHandler` from the args.
Every JAX process writes its own ``process_<i>-of-<n>.json`` in the item directory.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orbax.checkpoint as ocp
from orbax.checkpoint import future as ocp_future

from grain_core.checkpoint import files


class CheckpointHandler(ocp.AsyncCheckpointHandler):
    """Saves and restores ``DatasetIterator`` (or DataLoader iterator) states as JSON."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Orbax may pass handler options (multiprocessing options...); the files are per process.
        del args, kwargs

    @staticmethod
    def _iterator(item: Any, args: Any) -> Any:
        iterator = args.item if args is not None else item
        if iterator is None:
            raise ValueError("CheckpointHandler.save needs args=CheckpointSave(iterator).")
        return iterator

    # Orbax writes a step into a temporary directory and renames it when every item is done, so a
    # step is committed atomically; the per-file fsync is left to that commit (durable=False).

    async def async_save(
        self, directory: Any, item: Any = None, args: CheckpointSave | None = None
    ) -> list[Any]:
        # The state is taken here, synchronously with mngr.save(); only the write is deferred.
        write = files.save_iterator_state(self._iterator(item, args), directory, durable=False)
        return [ocp_future.CommitFutureAwaitingContractedSignals(write, name="grain_core_iterator")]

    def save(self, directory: Any, item: Any = None, args: CheckpointSave | None = None) -> None:
        files.write_state_file(directory, self._iterator(item, args).get_state(), durable=False)

    def restore(
        self, directory: Any, item: Any = None, args: CheckpointRestore | None = None
    ) -> Any:
        iterator = args.item if args is not None else item
        if iterator is None:
            raise ValueError("CheckpointHandler.restore needs args=CheckpointRestore(iterator).")
        files.restore_from_directory(iterator, directory)
        return iterator

    def metadata(self, directory: Any) -> Any:
        return None

    def structure(self, directory: Any) -> Any:
        """Orbax's legacy handler interface; iterator checkpoints have no tree structure."""
        return None

    def finalize(self, directory: Any) -> None:
        pass

    def close(self) -> None:
        pass


@ocp.args.register_with_handler(CheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):
    """``mngr.save(step, args=CheckpointSave(iterator))``: saves the iterator's current state."""

    item: Any


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
    """``mngr.restore(step, args=CheckpointRestore(iterator))``: restores ``iterator`` in place."""

    item: Any
