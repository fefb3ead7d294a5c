"""The optional C accelerators of the remote reader: ``_riegeli_native`` (the decode loop of
``group_size:1`` chunks and HighwayHash) and, on Linux, ``_http_native`` (the request loop of
``http_ranges`` over epoll). Built where a C compiler and the Python headers are present; without
them the package installs all the same and runs both loops in Python (``optional=True``: a failed
build is a warning, not an error). zstd comes from the system's libzstd at run time (dlopen), so
no zstd headers are needed to build it."""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "grain_plugin_arrayrecord._riegeli_native",
            ["grain_plugin_arrayrecord/_riegeli_native.c"],
            extra_compile_args=["/O2"] if sys.platform == "win32" else ["-O3"],
            libraries=["dl", "pthread"] if sys.platform.startswith("linux") else [],
            optional=True,
        ),
        *(
            [
                Extension(
                    "grain_plugin_arrayrecord._http_native",
                    ["grain_plugin_arrayrecord/_http_native.c"],
                    extra_compile_args=["-O2"],
                    optional=True,
                )
            ]
            if sys.platform.startswith("linux")
            else []
        ),
    ]
)
