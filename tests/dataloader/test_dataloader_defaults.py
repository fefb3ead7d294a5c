"""DataLoader defaults (restores across worker counts: ``test_dataloader_elastic.py``)."""

from __future__ import annotations

import pytest

import grain_core as grain
from grain_core import data_loader


def _loader(workers=0, **kw):
    return grain.DataLoader(
        data_source=list(range(20)),
        sampler=grain.IndexSampler(20, shuffle=True, seed=1, num_epochs=1),
        worker_count=workers,
        **kw,
    )


@pytest.mark.parametrize(
    "cpus,workers,threads", [(1, 0, 0), (2, 0, 2), (2, 2, 0), (2, 8, 0), (64, 0, 16), (64, 4, 16), (32, 4, 8)]
)
def test_default_read_threads_follow_the_machine(monkeypatch, cpus, workers, threads):
    monkeypatch.setattr(data_loader, "available_cpus", lambda: cpus)
    opts = data_loader.default_read_options(workers)
    assert opts.num_threads == threads
    assert opts.prefetch_buffer_size == grain.ReadOptions().prefetch_buffer_size
    if workers == 0:
        assert _loader().read_options.num_threads == threads


def test_explicit_read_options_win():
    opts = grain.ReadOptions(num_threads=3, prefetch_buffer_size=7)
    assert _loader(read_options=opts).read_options is opts


def test_shard_options_reuse_check_int():
    with pytest.raises(TypeError, match="ShardOptions.shard_index must be an int, got str"):
        grain.ShardOptions("0", 2)
    with pytest.raises(ValueError, match="ShardOptions.shard_count must be positive, got 0"):
        grain.ShardOptions(0, 0)
    with pytest.raises(ValueError, match="shard_index must be in"):
        grain.ShardOptions(-1, 2)
