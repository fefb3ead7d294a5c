"""Types of the plugin's optional C request loop (``_http_native.c``; Linux only: elsewhere the
module has no ``Fetch``)."""

#: Why a range failed (besides an HTTP status > 0 and ``-errno``); see ``http_ranges``.
ERR_FALLBACK: int
ERR_CLOSED: int
ERR_NOT_HTTP: int
ERR_TOO_MUCH: int
ERR_LONG_HEAD: int
ERR_TIMEOUT: int

class Fetch:
    """One call's ranges: ``servers`` are ``(family, numeric address, port, Host header, idle
    descriptors)`` (the descriptors are the fetch's from then on), ``requests`` are ``(server,
    target, start, end)``."""

    left: int
    def __init__(
        self,
        servers: list[tuple[int, str, int, str, list[int]]],
        requests: list[tuple[int, bytes, int, int]],
        concurrency: int,
        timeout: float,
        max_idle: int,
        initial_new: int,
        grow_after: float,
    ) -> None: ...
    def run(self, wait: float) -> list[tuple[int, memoryview | int]]: ...
    def idle(self) -> list[list[int]]: ...
    def close(self) -> None: ...
