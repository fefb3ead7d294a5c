"""The conformance kit's stage checks for the range source."""

import grain_core as grain
from grain_core import testing


def make():
    return grain.MapDataset.range(3, 60, 2).shuffle(seed=1)


def make_other():
    return grain.MapDataset.range(3, 61, 2).shuffle(seed=1)


def test_range_source_conforms():
    testing.check_stage(make, foreign=make_other)
