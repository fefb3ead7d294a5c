"""The DataLoader benchmark's decode operation for grain_core, in a module of its own: worker
processes import the module that defines an operation's class to unpickle it, so this one imports
grain_core only (defining it next to grain's class would make every grain_core worker import
google's grain too)."""

from __future__ import annotations

import numpy as np

import grain_core


def decode(record):
    return np.frombuffer(record, dtype=np.uint8)


class Decode(grain_core.transforms.Map):
    def map(self, record):
        return decode(record)
