"""The one-host pipe path (``grain_plugin_ray.pipe_path``): actors on the consumer's node talk to it
over ``mp_prefetch``'s pipe transport. The rest of the plugin's suite runs on this path by default
(``RayRuntime(pipes=True)``); these tests check when it is used, that it gives exactly what the
actor-call path and worker processes give, and that a connection without the actor's token is
refused."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
from grain_plugin_ray import RayRuntime
from ray_pipelines import pipeline

import grain_core as grain
from grain_core.testing.compare import assert_elements_equal

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

MP = grain.MultiprocessingOptions


def ours() -> list[str]:
    mine = f"gcrt{os.getpid()}x"
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(mine))


def big_pipeline(n: int = 41) -> grain.IterDataset:
    return pipeline(n).map(lambda e: {**e, "big": np.full(1 << 15, e["x"], np.int64)})


def test_actors_on_this_node_use_pipes_with_the_same_output_and_states():
    ref = list(iter(big_pipeline().mp_prefetch(MP(num_workers=2))))
    outputs = {}
    for pipes in (True, False):
        rt = RayRuntime(num_cpus=0, pipes=pipes)
        with iter(big_pipeline().mp_prefetch(MP(num_workers=2), runtime=rt)) as it:
            head = [next(it) for _ in range(9)]
            locations = [c.location(60) for c in it.pool.channels]
            assert all((loc.pipe_address is not None) == pipes for loc in locations)
            assert all(loc.shared_memory for loc in locations)
            state = it.get_state()
            outputs[pipes] = (head + list(it), state)
    assert_elements_equal(ref, outputs[True][0], "pipe path")
    assert_elements_equal(ref, outputs[False][0], "actor-call path")
    for e in outputs[True][0]:
        assert e["big"].flags.writeable and int(e["big"][-1]) == e["x"]
    for pipes in (True, False):  # each path's state (its encoding follows the messages) restores
        with iter(big_pipeline().mp_prefetch(MP(num_workers=2))) as again:
            again.set_state(outputs[pipes][1])
            assert_elements_equal(ref[9:], list(again), f"restored from pipes={pipes}")
    assert ours() == []


def test_restarts_and_switching_off_use_actor_calls():
    for rt in (RayRuntime(num_cpus=0, pipes=False), RayRuntime(num_cpus=0, max_restarts=1)):
        with iter(pipeline(8).mp_prefetch(MP(num_workers=2), runtime=rt)) as it:
            got = [int(e["x"]) for e in it]
            assert all(c.location(60).pipe_address is None for c in it.pool.channels)
        assert sorted(got) == list(range(8))


def test_a_connection_without_the_token_is_closed_and_the_consumer_still_connects():
    ref = [int(e["x"]) for e in pipeline(12)]
    with iter(pipeline(12).mp_prefetch(MP(num_workers=2), runtime=RayRuntime(num_cpus=0))) as it:
        address = it.pool.channels[0].location(60).pipe_address
        assert address is not None and address.startswith("\0")  # abstract: no file
        intruder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        intruder.settimeout(30)
        try:
            intruder.connect(address)
            intruder.sendall(b"0" * 32 + b"M")
            assert intruder.recv(1) == b""  # closed by the actor, unread
        finally:
            intruder.close()
        assert [int(e["x"]) for e in it] == ref


def test_bad_pipes_option_is_refused_early():
    with pytest.raises(TypeError, match=r"RayRuntime.pipes must be True or False"):
        RayRuntime(pipes="yes")  # type: ignore[arg-type]
