"""Implements ``register_sources`` with an argument the hook does not have."""

from grain_core.plugins import hookimpl


class BadSignatureSource:
    def __len__(self):
        return 1

    def __getitem__(self, i):
        return i


@hookimpl
def register_sources(register, dataset_options):
    register(BadSignatureSource)
