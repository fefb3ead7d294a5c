"""Registers one name, then fails half-way through its hook."""

from grain_core.plugins import hookimpl


def half_registered_factory_xyz():
    return 0


@hookimpl
def register_transforms(register):
    register(half_registered_factory_xyz)
    raise RuntimeError("boom")
