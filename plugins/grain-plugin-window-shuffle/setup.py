"""The optional C accelerator of the window orders (``_window_orders``): built where a C compiler
and the Python headers are present; without them the package installs all the same and computes
the orders with numpy (``optional=True``: a failed build is a warning, not an error)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "grain_plugin_window_shuffle._window_orders",
            ["grain_plugin_window_shuffle/_window_orders.c"],
            extra_compile_args=["-O3"] if __import__("sys").platform != "win32" else ["/O2"],
            optional=True,
        )
    ]
)
