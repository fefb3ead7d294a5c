"""Implements a misspelled hook (``register_sorces``) next to a correct one."""

from grain_core.plugins import hookimpl


class UnknownHookSource:
    def __len__(self):
        return 1

    def __getitem__(self, i):
        return i


@hookimpl
def register_sorces(register):
    register(UnknownHookSource)


@hookimpl
def register_transforms(register):
    register(UnknownHookSource, name="UnknownHookTransform")
