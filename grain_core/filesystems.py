"""Files wherever they live: one way for file sources to take a filesystem, and bounded range reads.

Every file source (ArrayRecord, TFRecord, Parquet plugins) accepts the same two optional arguments
and resolves them with :func:`resolve_filesystem`:

* ``filesystem=`` an fsspec filesystem object (``s3fs.S3FileSystem(...)``, ``gcsfs.GCSFileSystem``,
  ``fsspec.filesystem("memory")``...) or a ``pyarrow.fs.FileSystem`` (wrapped for fsspec);
* ``storage_options=`` a dict handed to the URL's own fsspec filesystem (e.g. ``{"anon": True}``,
  ``{"client_kwargs": {"endpoint_url": ...}}``).

With neither, a URL (``s3://``, ``gs://``, ``http(s)://``, ``memory://``...) gets fsspec's default
filesystem for its protocol with that filesystem's usual environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``... for S3), and a plain path is local. Giving both is an error.

:func:`read_ranges` reads many byte ranges of one file concurrently (fsspec's async ``cat_ranges``
where the filesystem is async, a bounded thread pool otherwise), retrying transient failures with
exponential backoff a bounded number of times (:class:`RetryPolicy`); every wait is bounded.
fsspec is imported only when a remote path is used (install ``fsspec`` and the protocol's package,
e.g. ``s3fs``, ``gcsfs``, ``aiohttp`` for HTTP).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "RetryPolicy",
    "check_filesystem_args",
    "file_size",
    "is_local",
    "is_transient",
    "read_ranges",
    "resolve_filesystem",
    "retry_ranges",
    "storage_token",
    "with_retries",
]

T = TypeVar("T")


def is_local(path: str, filesystem: Any = None) -> bool:
    """True for a plain local path (or ``file://`` URL) read without an explicit filesystem."""
    if filesystem is not None:
        return False
    return "://" not in path or path.startswith("file://")


def check_filesystem_args(filesystem: Any, storage_options: Any, who: str) -> None:
    """Checks the ``filesystem=`` / ``storage_options=`` pair early (types, not both).

    Raises:
      TypeError: ``storage_options`` not a mapping with str keys, or ``filesystem`` neither an
        fsspec nor a pyarrow filesystem.
      ValueError: both given.
    """
    if filesystem is not None and storage_options is not None:
        raise ValueError(
            f"{who}: pass either filesystem= or storage_options=, not both (storage_options "
            "configure the URL's default filesystem; an explicit filesystem is already configured)."
        )
    if storage_options is not None and (
        not isinstance(storage_options, Mapping)
        or not all(isinstance(k, str) for k in storage_options)
    ):
        raise TypeError(
            f"{who}: storage_options must be a dict of option names (str) to values, got "
            f"{type(storage_options).__name__}."
        )
    if filesystem is not None:
        _as_fsspec(filesystem, who)


def _as_fsspec(filesystem: Any, who: str) -> Any:
    try:
        import fsspec
    except ImportError as e:  # pragma: no cover - fsspec is installed with the file plugins
        raise ImportError(
            f"{who}: reading through a filesystem needs fsspec (pip install fsspec)."
        ) from e
    if isinstance(filesystem, fsspec.AbstractFileSystem):
        return filesystem
    try:
        import pyarrow.fs as pafs
    except ImportError:
        pafs = None
    if pafs is not None and isinstance(filesystem, pafs.FileSystem):
        from fsspec.implementations.arrow import ArrowFSWrapper

        return ArrowFSWrapper(filesystem)
    raise TypeError(
        f"{who}: filesystem must be an fsspec filesystem (e.g. s3fs.S3FileSystem()) or a "
        f"pyarrow.fs.FileSystem, got {type(filesystem).__name__}."
    )


def resolve_filesystem(
    path: str,
    filesystem: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    who: str = "grain_core",
) -> tuple[Any, str]:
    """``(fsspec filesystem, path inside it)`` for ``path``: the explicit ``filesystem``, else the
    URL's default fsspec filesystem built with ``storage_options`` (local for a plain path).

    Raises:
      TypeError / ValueError: as :func:`check_filesystem_args`.
      ValueError: a URL whose protocol fsspec does not know (naming the package to install).
    """
    check_filesystem_args(filesystem, storage_options, who)
    if filesystem is not None:
        fs = _as_fsspec(filesystem, who)
        return fs, fs._strip_protocol(path)
    try:
        import fsspec.core
    except ImportError as e:  # pragma: no cover
        raise ImportError(f"{who}: reading {path!r} needs fsspec (pip install fsspec).") from e
    try:
        return fsspec.core.url_to_fs(path, **dict(storage_options or {}))
    except (ImportError, ValueError) as e:
        raise ValueError(
            f"{who}: no filesystem for {path!r}: {e} (install the protocol's fsspec package, e.g. "
            "s3fs for s3://, gcsfs for gs://, aiohttp for http(s)://)."
        ) from e


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How transient read failures are retried: at most ``attempts`` tries in all, sleeping
    ``initial_delay_s * 2**k`` (capped at ``max_delay_s``, with up to 25% jitter) before try
    ``k + 2``. So a failing read gives up after a bounded time."""

    attempts: int = 5
    initial_delay_s: float = 0.05
    max_delay_s: float = 2.0

    def __post_init__(self):
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be an int >= 1, got {self.attempts!r}.")
        if not 0 <= self.initial_delay_s <= self.max_delay_s:
            raise ValueError(
                "RetryPolicy needs 0 <= initial_delay_s <= max_delay_s, got "
                f"{self.initial_delay_s} and {self.max_delay_s}."
            )

    def delay(self, attempt: int) -> float:
        """Seconds to sleep after failed try ``attempt`` (0-based)."""
        base = min(self.initial_delay_s * (2**attempt), self.max_delay_s)
        return base * (1 + 0.25 * random.random())


def is_transient(error: BaseException) -> bool:
    """True for failures worth retrying: connection and timeout errors, HTTP 408/429/5xx; false
    for missing files, permissions and bad requests."""
    if isinstance(
        error, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
    ):
        # fsspec's HTTP filesystem reports any failed size query as FileNotFoundError: judge it
        # by its cause (a 503 is transient, a 404 is not).
        cause = error.__cause__
        return isinstance(error, FileNotFoundError) and cause is not None and is_transient(cause)
    status = getattr(error, "status", None)
    if not isinstance(status, int):
        status = getattr(error, "code", None)
    if isinstance(status, int) and 100 <= status < 600:
        return status >= 500 or status in (408, 429)
    if isinstance(error, (OSError, TimeoutError, ConnectionError)):
        return True
    names = {c.__name__ for c in type(error).__mro__}
    return bool(
        names & {"ClientError", "ServerTimeoutError", "ClientPayloadError", "IncompleteRead"}
    )


def with_retries(fn: Callable[[], T], what: str, retry: RetryPolicy | None = None) -> T:
    """``fn()``, retried on transient errors per ``retry``; the last error is re-raised as an
    ``OSError`` naming ``what`` and the number of tries (non-transient errors at once, unchanged)."""
    retry = retry or RetryPolicy()
    for attempt in range(retry.attempts):
        try:
            return fn()
        except Exception as e:
            if not is_transient(e):
                raise
            if attempt + 1 == retry.attempts:
                raise OSError(f"{what} failed after {retry.attempts} tries: {e!r}") from e
            time.sleep(retry.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover


_POOL_LOCK = threading.Lock()
_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _pool(concurrency: int) -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(4, min(64, concurrency)), thread_name_prefix="grain_core-ranges"
            )
        return _POOL


def _fetch(
    fs: Any, paths: list[str], starts: list[int], ends: list[int], concurrency: int
) -> list[Any]:
    """One try at every range; each result is ``bytes`` or the exception that range raised."""
    if getattr(fs, "async_impl", False):
        return fs.cat_ranges(paths, starts, ends, batch_size=concurrency, on_error="return")

    def one(p: str, s: int, e: int) -> Any:
        try:
            return fs.cat_file(p, start=s, end=e)
        except Exception as err:
            return err

    if len(starts) == 1 or getattr(fs, "protocol", None) in ("memory", "file", ("file", "local")):
        return [one(p, s, e) for p, s, e in zip(paths, starts, ends)]
    return list(_pool(concurrency).map(one, paths, starts, ends))


def read_ranges(
    fs: Any,
    path: str | Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    *,
    retry: RetryPolicy | None = None,
    concurrency: int = 64,
) -> list[bytes]:
    """The bytes ``[starts[i], ends[i])`` of ``path`` in ``fs``, read concurrently (at most
    ``concurrency`` requests in flight). ``path`` may also be a sequence of paths of ``fs``, one
    per range (ranges of several files in one concurrent batch). Ranges that fail transiently are
    retried (only those) per ``retry``; a range that fails for good raises ``OSError`` naming the
    file and the range (``FileNotFoundError`` / ``PermissionError`` pass through). A short range (past the end of the
    file) is returned short: callers that know the file's size check it."""
    retry = retry or RetryPolicy()
    starts, ends = [int(s) for s in starts], [int(e) for e in ends]
    paths = [path] * len(starts) if isinstance(path, str) else [str(p) for p in path]
    if len(paths) != len(starts) or len(ends) != len(starts):
        raise ValueError(
            f"read_ranges: {len(paths)} paths, {len(starts)} starts and {len(ends)} ends; give "
            "one path (or one per range) and as many starts as ends."
        )

    def one_try(todo: list[int]) -> list[Any]:
        return _fetch(
            fs,
            [paths[i] for i in todo],
            [starts[i] for i in todo],
            [ends[i] for i in todo],
            concurrency,
        )

    return [bytes(r) for r in retry_ranges(one_try, paths, starts, ends, retry)]


def retry_ranges(
    one_try: Callable[[list[int]], list[Any]],
    paths: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    retry: RetryPolicy,
) -> list[Any]:
    """The retry rules of :func:`read_ranges`, for a reader with its own way of fetching ranges.

    ``one_try(todo)`` makes one try at the ranges ``todo`` (indices into ``paths`` / ``starts`` /
    ``ends``) and returns, in the same order, each range's data or the exception it raised.
    Ranges that failed transiently (:func:`is_transient`) are tried again, only those, after
    ``retry``'s backoff, at most ``retry.attempts`` tries in all; ``FileNotFoundError`` /
    ``PermissionError`` pass through at once; any other failure, or a range still failing after the
    last try, raises ``OSError`` naming the file and the byte range. Returns the data per range."""
    out: list[Any] = [None] * len(paths)
    todo = list(range(len(paths)))
    failed: list[tuple[int, BaseException]] = []
    for attempt in range(retry.attempts):
        got = one_try(todo)
        failed = []
        for i, r in zip(todo, got):
            if isinstance(r, BaseException):
                if not is_transient(r):
                    if isinstance(r, (FileNotFoundError, PermissionError)):
                        raise r
                    raise OSError(
                        f"reading bytes [{starts[i]}, {ends[i]}) of {paths[i]!r} failed: {r!r}"
                    ) from r
                failed.append((i, r))
            else:
                out[i] = r
        if not failed:
            return out
        todo = [i for i, _ in failed]
        if attempt + 1 < retry.attempts:
            time.sleep(retry.delay(attempt))
    i, err = failed[0]
    raise OSError(
        f"reading bytes [{starts[i]}, {ends[i]}) of {paths[i]!r} failed after {retry.attempts} tries "
        f"({len(failed)} range(s) still failing): {err!r}"
    ) from err


def file_size(fs: Any, path: str, retry: RetryPolicy | None = None) -> int:
    """``path``'s size in bytes, retried like :func:`read_ranges`."""
    return int(with_retries(lambda: fs.size(path), f"finding the size of {path!r}", retry))


def storage_token(fs: Any) -> str:
    """A stable text naming ``fs`` (its protocol), for reprs identical in every process."""
    proto = getattr(fs, "protocol", "fs")
    return proto[0] if isinstance(proto, (tuple, list)) else str(proto)
