"""The image benchmark's DataLoader operation, for either library: worker processes import the
module of an operation's class to unpickle it, and :func:`operation_class` builds the class only
for the library asked for, so grain_core's workers never import google's grain."""

from __future__ import annotations

from functools import cache
from typing import Any

from image_work import decode_augment


@cache
def operation_class(library: str) -> type:
    """A ``RandomMapTransform`` subclass of ``library`` ("grain_core" or "grain") running
    :func:`image_work.decode_augment`; registered in this module under a name that says which."""
    if library == "grain_core":
        import grain_core

        base: Any = grain_core.transforms.RandomMap
    else:
        import grain.python as grain

        base = grain.RandomMapTransform

    def random_map(self: Any, element: bytes, rng: Any) -> Any:
        return decode_augment(element, rng)

    name = f"DecodeAugment_{library}"
    cls = type(name, (base,), {"random_map": random_map, "__module__": __name__})
    globals()[name] = cls
    return cls


def __getattr__(name: str) -> type:  # unpickling in a worker: build the class it names
    if name.startswith("DecodeAugment_"):
        return operation_class(name.removeprefix("DecodeAugment_"))
    raise AttributeError(name)
