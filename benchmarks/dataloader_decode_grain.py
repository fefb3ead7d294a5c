"""The DataLoader benchmark's decode operation for google's grain, in a module of its own (see
``dataloader_decode``): grain's worker processes import only grain and numpy for it."""

from __future__ import annotations

import grain.python as grain_python
import numpy as np


class Decode(grain_python.MapTransform):
    def map(self, record):
        return np.frombuffer(record, dtype=np.uint8)
