"""The plugin's C accelerators: ``_riegeli_native``'s HighwayHash equal to HighwayHash's reference
code (highwayhash-cffi, in the test extra) at every length a remainder path can take, and both
accelerators (``_riegeli_native``, ``_http_native``) built wherever they can be (the C request
loop's behaviour is tested in ``test_http_ranges.py``, which runs every test with both loops)."""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import sys
import sysconfig

import numpy as np
import pytest
from grain_plugin_arrayrecord import http_ranges, riegeli

pytestmark = pytest.mark.timeout(120)

needs_native = pytest.mark.skipif(
    riegeli._native is None,
    reason="the C accelerator is not built (test_built_where_it_can_be says why)",
)


def _libzstd_loads() -> bool:
    """Whether the system's libzstd loads under one of the names the accelerator tries."""
    for name in ("libzstd.so.1", "libzstd.so", "libzstd.1.dylib", "libzstd.dylib"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def test_built_where_it_can_be():
    """Where a C compiler and the Python headers exist (CI, a developer's checkout), an install
    builds the accelerator, and where the system has libzstd it decodes in C; a silently failed
    build would leave the Python loop in use."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if shutil.which(cc) and os.path.exists(headers):
        assert riegeli._native is not None, (
            f"{cc} and {headers} exist but grain_plugin_arrayrecord._riegeli_native was not "
            "built: reinstall the plugin and read the build log"
        )
        assert riegeli.VERIFIES_HASHES
        assert riegeli.NATIVE_DECODE == _libzstd_loads()
        # the request loop of http_ranges (epoll: Linux only)
        assert http_ranges.NATIVE == sys.platform.startswith("linux")
    else:
        assert riegeli._native is None and not riegeli.NATIVE_DECODE
        assert not http_ranges.NATIVE


@pytest.fixture(params=["AVX2", "portable"])
def simd(request):
    """HighwayHash's packet loop with AVX2 (where the CPU has it) or the portable one."""
    native = riegeli._native
    on = native._set_simd(request.param == "AVX2")
    if request.param == "AVX2" and not on:
        native._set_simd(True)
        pytest.skip("this CPU has no AVX2 (the portable loop is tested)")
    yield request.param
    native._set_simd(True)


@needs_native
def test_highwayhash_is_the_reference_codes(simd):
    """With AVX2 and without: the same hashes as HighwayHash's reference code."""
    from highwayhash._highwayhash import ffi, lib

    rng = np.random.default_rng(7)
    keys = [riegeli._HASH_KEY, rng.bytes(32)]
    for key in keys:
        ref_key = ffi.new("uint64_t[4]", list(struct.unpack("<4Q", key)))
        for size in [*range(0, 130), 1000, 1024, 4096, 65_543]:
            data = rng.bytes(size)
            want = int(lib.HighwayHash64(ffi.from_buffer(data), size, ref_key))
            assert riegeli._native.highwayhash64(data, key) == want, size
            assert riegeli._native.highwayhash64(bytearray(data), key) == want
    assert riegeli.highwayhash64(memoryview(b"abc")) == riegeli._native.highwayhash64(
        b"abc", riegeli._HASH_KEY
    )


@needs_native
def test_bad_arguments_are_refused_with_the_reason():
    native = riegeli._native
    with pytest.raises(ValueError, match="32 bytes"):
        native.highwayhash64(b"x", b"short")
    with pytest.raises(ValueError, match="differ in length"):
        native.decode_singles(b"", 0, [0], [], riegeli._HASH_KEY)
    with pytest.raises(TypeError):
        native.decode_singles(b"", 0, ["a"], [1], riegeli._HASH_KEY)
    # Spans outside the data are not read: the general path names them.
    assert native.decode_singles(b"\0" * 100, 0, [50], [400], riegeli._HASH_KEY) == ([None], [])
