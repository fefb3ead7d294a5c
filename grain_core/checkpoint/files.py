"""The on-disk format of an iterator checkpoint: one JSON file per JAX process.

``<directory>/process_<i>-of-<n>.json`` holds::

    {"format": "grain_core.iterator_state", "version": 1,
     "process_index": i, "process_count": n,
     "state_type": "dict" | "json_bytes",
     "state": <the iterator's get_state()>}

``state_type`` is ``"json_bytes"`` for iterators whose ``get_state()`` returns JSON bytes (the
``DataLoader``'s); ``state`` then holds that JSON text as a string and restoring hands the same
bytes back. Files are written to a temporary name and renamed, so a reader sees a whole file or
none. They are parsed with ``json`` only: nothing is ever unpickled.

The files Grain's own ``PyGrainCheckpointHandler`` writes (same names, holding the iterator's
state itself: the decoded JSON of a ``DataLoaderIterator`` state, or a dataset iterator's dict) are
read too: :func:`read_state_file` returns such a state as it is, and :func:`restore_iterator`
hands it to ``set_state``, which translates it (:mod:`grain_core.grain_states`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from collections.abc import Coroutine, Mapping
from typing import Any

from grain_core.checkpoint.errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    CheckpointPipelineMismatchError,
    CheckpointProcessCountError,
)
from grain_core.dataset import elastic
from grain_core.grain_states import is_grain_state
from grain_core.state import StateMismatchError, check_json_state

FORMAT_NAME = "grain_core.iterator_state"
FORMAT_VERSION = 1
_FILE_RE = re.compile(r"^process_(\d+)-of-(\d+)\.json$")


def process_info() -> tuple[int, int]:
    """Returns ``(jax.process_index(), jax.process_count())``, or ``(0, 1)`` without JAX.

    JAX is consulted only when the program has imported it (a multi-process JAX job always has):
    checkpointing never imports JAX itself.
    """
    jax = sys.modules.get("jax")
    if jax is None:
        return 0, 1
    try:
        return int(jax.process_index()), int(jax.process_count())
    except Exception:  # a partially imported or stubbed jax
        return 0, 1


def state_file_name(process_index: int, process_count: int) -> str:
    """``process_<index>-of-<count>.json``."""
    return f"process_{process_index}-of-{process_count}.json"


def encode_state(state: Any, process_index: int = 0, process_count: int = 1) -> dict[str, Any]:
    """Wraps ``get_state()`` output in the versioned envelope; raises ``TypeError`` for non-JSON."""
    payload: Any
    if isinstance(state, (bytes, bytearray, memoryview)):
        try:
            text = bytes(state).decode("utf-8")
            json.loads(text)
        except (UnicodeDecodeError, ValueError) as e:
            raise TypeError(
                "get_state() returned bytes that are not UTF-8 JSON; grain_core checkpoints hold "
                f"JSON only: {e}"
            ) from e
        state_type, payload = "json_bytes", text
    elif isinstance(state, Mapping):
        check_json_state(state)
        state_type, payload = "dict", state
    else:
        raise TypeError(
            f"get_state() returned {type(state).__name__}; a grain_core checkpoint holds a JSON "
            "dict (or JSON bytes)."
        )
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "process_index": int(process_index),
        "process_count": int(process_count),
        "state_type": state_type,
        "state": payload,
    }


def decode_state(doc: Any, where: str = "checkpoint") -> Any:
    """Validates an envelope made by :func:`encode_state` and returns the iterator state in it."""
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT_NAME:
        raise CheckpointFormatError(
            f"{where} is not a grain_core iterator state (expected a JSON object with "
            f"format={FORMAT_NAME!r}); it was written by another program or is corrupted."
        )
    version = doc.get("version")
    if version != FORMAT_VERSION:
        raise CheckpointFormatError(
            f"{where} has iterator-state format version {version!r}; this grain_core reads version "
            f"{FORMAT_VERSION}. Restore it with the grain_core release that wrote it."
        )
    missing = [k for k in ("process_index", "process_count", "state_type", "state") if k not in doc]
    if missing:
        raise CheckpointFormatError(f"{where} lacks {missing}: the file is corrupted.")
    state_type, state = doc["state_type"], doc["state"]
    if state_type == "dict":
        if not isinstance(state, Mapping):
            raise CheckpointFormatError(
                f"{where}: state_type 'dict' but the state is not an object."
            )
        return state
    if state_type == "json_bytes":
        if not isinstance(state, str):
            raise CheckpointFormatError(
                f"{where}: state_type 'json_bytes' but the state is not text."
            )
        try:
            json.loads(state)
        except ValueError as e:
            raise CheckpointFormatError(
                f"{where}: the saved JSON-bytes state is corrupted: {e}"
            ) from e
        return state.encode("utf-8")
    raise CheckpointFormatError(f"{where} has unknown state_type {state_type!r}.")


# ---------------------------------------------------------------------------------------------
# Paths: plain local paths through os (atomic rename), anything else through etils.epath.


def _is_remote(path: Any) -> bool:
    return "://" in os.fspath(path) if isinstance(path, (str, os.PathLike)) else True


def _join(directory: Any, name: str) -> Any:
    if _is_remote(directory):
        return directory / name
    return os.path.join(os.fspath(directory), name)


def _write_text_atomic(directory: Any, name: str, text: str, durable: bool = True) -> None:
    if _is_remote(directory):  # e.g. an epath.Path on GCS: write a temp object, then rename.
        final = directory / name
        tmp = directory / f".{name}.tmp-{uuid.uuid4().hex}"
        tmp.write_text(text)
        tmp.rename(final)
        return
    d = os.fspath(directory)
    os.makedirs(d, exist_ok=True)
    final = os.path.join(d, name)
    tmp = os.path.join(d, f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _list_names(directory: Any) -> list[str]:
    if _is_remote(directory):
        return sorted(p.name for p in directory.iterdir()) if directory.exists() else []
    d = os.fspath(directory)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def _read_text(path: Any) -> str:
    if _is_remote(path):
        return path.read_text()
    with open(path, encoding="utf-8") as f:
        return f.read()


def state_files(directory: Any) -> dict[tuple[int, int], str]:
    """Maps ``(process_index, process_count)`` to the file name, for each state file in ``directory``."""
    out = {}
    for name in _list_names(directory):
        m = _FILE_RE.match(name)
        if m:
            out[(int(m.group(1)), int(m.group(2)))] = name
    return out


# ---------------------------------------------------------------------------------------------
# Synchronous file API.


def write_state_file(
    directory: Any,
    state: Any,
    process_index: int | None = None,
    process_count: int | None = None,
    durable: bool = True,
) -> str:
    """Atomically writes ``state`` (a ``get_state()`` result) to ``directory``; returns the file name.

    ``durable`` also flushes the file to disk before the rename (skip it only where something else
    commits the directory atomically, as Orbax does)."""
    if process_index is None or process_count is None:
        process_index, process_count = process_info()
    text = json.dumps(encode_state(state, process_index, process_count), indent=2, allow_nan=False)
    name = state_file_name(process_index, process_count)
    _write_text_atomic(directory, name, text, durable)
    return name


def read_state_doc(directory: Any, name: str) -> Any:
    """Parses the JSON file ``name`` in ``directory``, raising ``CheckpointFormatError`` if damaged."""
    path = _join(directory, name)
    try:
        text = _read_text(path)
    except UnicodeDecodeError as e:
        raise CheckpointFormatError(f"{path} is corrupted (not UTF-8 text): {e}") from e
    try:
        return json.loads(text)
    except ValueError as e:
        raise CheckpointFormatError(
            f"{path} is truncated or corrupted ({len(text)} characters, JSON error: {e}). The "
            "checkpoint cannot be restored; use an earlier step."
        ) from e


def read_state_file(
    directory: Any,
    process_index: int | None = None,
    process_count: int | None = None,
) -> Any:
    """Reads and validates this process's state from ``directory``; returns the state.

    Raises ``CheckpointNotFoundError`` (no state file), ``CheckpointProcessCountError`` (written by
    another number of processes) or ``CheckpointFormatError`` (damaged / unknown version).
    """
    if process_index is None or process_count is None:
        process_index, process_count = process_info()
    name = state_file_name(process_index, process_count)
    files = state_files(directory)
    if (process_index, process_count) not in files:
        if not files:
            raise CheckpointNotFoundError(
                f"No grain_core iterator state in {directory}: expected {name} (found "
                f"{_list_names(directory) or 'nothing'})."
            )
        counts = sorted({c for _, c in files})
        if process_count not in counts:
            raise CheckpointProcessCountError(
                f"The iterator checkpoint in {directory} was written by {' or '.join(map(str, counts))} "
                f"JAX process(es), but this job runs {process_count}. Each process restores its own "
                "iterator state, so restore with the same process count (pipelines that support "
                "re-sharding are restored elastically by load / CheckpointRestore; see "
                "docs/checkpointing.md, 'Elastic restore')."
            )
        raise CheckpointNotFoundError(
            f"{directory} has no state for process {process_index} of {process_count} ({name}); "
            "the checkpoint is incomplete."
        )
    doc = read_state_doc(directory, name)
    if is_grain_file(doc):
        return doc  # written by Grain's PyGrainCheckpointHandler: the state itself
    state = decode_state(doc, str(_join(directory, name)))
    if (doc["process_index"], doc["process_count"]) != (process_index, process_count):
        raise CheckpointFormatError(
            f"{name} says it holds process {doc['process_index']} of {doc['process_count']}: the "
            "file was renamed or corrupted."
        )
    return state


def is_grain_file(doc: Any) -> bool:
    """True for the content of a state file written by Grain's ``PyGrainCheckpointHandler`` (an
    iterator state without grain_core's envelope)."""
    return isinstance(doc, Mapping) and "format" not in doc and is_grain_state(doc)


def _kind(state: Any) -> Any:
    if isinstance(state, (bytes, bytearray)):
        return "<json bytes>"
    return state.get("kind") if isinstance(state, Mapping) else type(state).__name__


def restore_iterator(iterator: Any, state: Any, where: str = "the checkpoint") -> None:
    """``iterator.set_state(state)``, atomically: on any refusal the iterator is left as it was.

    A state of another pipeline raises ``CheckpointPipelineMismatchError`` saying what differs.
    """
    current = iterator.get_state()
    mp_kind = "MultiprocessPrefetchDatasetIterator"
    # What the file holds, read once here; the state goes on down (to the elastic conversion, or
    # to set_state) only after.
    saved_kind, current_kind = _kind(state), _kind(current)
    if is_grain_file(state):
        pass  # a state Grain wrote: set_state translates it (or refuses, saying what differs)
    elif (
        isinstance(state, Mapping)
        and isinstance(current, Mapping)
        and current_kind != saved_kind
        and mp_kind in (current_kind, saved_kind)
    ):
        # Another mp_prefetch worker count, 0 (in process) included: an elastic restore. An
        # mp_prefetch iterator converts in set_state; an in-process one is converted here.
        if current_kind != mp_kind:
            try:
                state = elastic.adapt_state(iterator, state, where)
            except StateMismatchError as e:
                raise CheckpointPipelineMismatchError(
                    f"{where} does not fit this iterator: {e} The iterator was left unchanged."
                ) from e
    elif isinstance(current, (bytes, bytearray)) != isinstance(state, (bytes, bytearray)) or (
        isinstance(state, Mapping) and current_kind != saved_kind
    ):
        raise CheckpointPipelineMismatchError(
            f"{where} holds the state of a {saved_kind!r} iterator, but it is being restored into "
            f"a {current_kind!r} iterator: it comes from a different pipeline. Restore it into an "
            "iterator of the pipeline that saved it."
        )
    try:
        iterator.set_state(state)
    except BaseException as e:
        try:
            iterator.set_state(current)
        except (
            Exception
        ) as rollback:  # pragma: no cover - a set_state that cannot take its own state
            raise CheckpointError(
                f"Restoring {where} failed ({e}) and the iterator could not be put back "
                f"({rollback}); rebuild it before use."
            ) from e
        if isinstance(e, (StateMismatchError, KeyError, TypeError, ValueError, IndexError)):
            raise CheckpointPipelineMismatchError(
                f"{where} does not fit this iterator: it comes from a different pipeline (or a "
                f"different version of it): {e}. The iterator was left unchanged."
            ) from e
        raise


# ---------------------------------------------------------------------------------------------
# The async API behind DatasetIterator.save / load and the Orbax handler.


async def _resolve_directory(directory: Any) -> Any:
    await_creation = getattr(directory, "await_creation", None)
    if await_creation is not None:
        created = await await_creation()
        return created if created is not None else directory.path
    return directory


def save_iterator_state(
    iterator: Any, directory: Any, *, durable: bool = True
) -> Coroutine[Any, Any, None]:
    """Captures ``iterator.get_state()`` now and returns a coroutine that writes it to ``directory``.

    ``directory`` is a path (``str``, ``os.PathLike``, ``epath.Path``) or an Orbax
    ``PathAwaitingCreation`` (anything with ``async await_creation()``). The state is taken at the
    call, so ``next(iterator)`` before the coroutine runs does not change what is saved.
    """
    index, count = process_info()
    text = json.dumps(encode_state(iterator.get_state(), index, count), indent=2, allow_nan=False)
    name = state_file_name(index, count)

    async def write() -> None:
        path = await _resolve_directory(directory)
        _write_text_atomic(path, name, text, durable)

    return write()


def restore_from_directory(iterator: Any, path: Any) -> None:
    """Restores ``iterator`` from this process's state file in ``path``; when the checkpoint was
    written by another number of JAX processes, restores elastically where the pipeline allows it
    (:mod:`grain_core.checkpoint.elastic`), else raises ``CheckpointProcessCountError``."""
    index, count = process_info()
    found = state_files(path)
    if found and (index, count) not in found and count not in {c for _, c in found}:
        restore_across_process_counts(iterator, path, index, count)
        return
    state = read_state_file(path, index, count)
    restore_iterator(iterator, state, f"the iterator checkpoint in {path}")


async def load_iterator_state(iterator: Any, directory: Any) -> None:
    """Reads this process's state from ``directory`` and restores ``iterator`` to it atomically
    (elastically when written by another process count; see :func:`restore_from_directory`)."""
    path = await _resolve_directory(directory)
    restore_from_directory(iterator, path)


def restore_across_process_counts(
    iterator: Any, directory: Any, process_index: int, process_count: int
) -> None:
    """Reads every process's state in ``directory`` and restores ``iterator`` elastically (what the
    states mean for ``process_count`` processes: :mod:`grain_core.checkpoint.elastic`)."""
    from grain_core.checkpoint.elastic import elastic_process_state

    found = state_files(directory)
    counts = sorted({c for _, c in found})
    if len(counts) != 1:
        raise CheckpointProcessCountError(
            f"{directory} holds state files of {counts} process counts; cannot tell which to restore."
        )
    n = counts[0]
    missing = [state_file_name(p, n) for p in range(n) if (p, n) not in found]
    if missing:
        raise CheckpointProcessCountError(
            f"The iterator checkpoint in {directory} was written by {n} JAX process(es), but this "
            f"job runs {process_count}; re-sharding it (elastic restore) needs every process's "
            f"state and {missing} is missing. Restore with {n} process(es)."
        )
    states = [read_state_file(directory, p, n) for p in range(n)]
    state = elastic_process_state(iterator, states, process_index, process_count, str(directory))
    restore_iterator(iterator, state, f"the iterator checkpoint in {directory}")
