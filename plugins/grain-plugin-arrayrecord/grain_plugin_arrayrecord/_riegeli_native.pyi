"""Types of the plugin's optional C accelerator (``_riegeli_native.c``)."""

from collections.abc import Sequence

from typing_extensions import Buffer

#: Whether the system's libzstd was found (zstd chunks are decoded in C).
ZSTD: bool

def highwayhash64(data: Buffer, key: Buffer) -> int: ...
def decode_singles(
    data: Buffer, base: int, begins: Sequence[int], ends: Sequence[int], key: Buffer
) -> tuple[list[bytes | None], list[int]]: ...
def _set_simd(on: bool) -> bool: ...
