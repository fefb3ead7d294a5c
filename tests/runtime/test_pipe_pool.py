"""The pipe transport as a runtime author uses it (``grain_core.author``'s ``PipePool``,
``PipeEndpoint``, ``CreditSender``; docs/writing-plugins.md, "The pipe transport for a runtime"):
a runtime whose workers are threads of this process, each talking to the consumer over its own
message pipe and credit channel with elements in shared memory, gives ``mp_prefetch``'s elements
and states; a worker whose pipe ends is reported with its ``loss()``; ``close()`` stops every
worker through ``stop()`` and leaves no segment behind."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import threading
import time

import numpy as np
import pytest
from runtime_helpers import our_segments

import grain_core as grain
from grain_core.author import (
    CreditSender,
    PipeEndpoint,
    PipePool,
    WorkerError,
    WorkerJob,
    WorkerLoop,
    new_shm_prefix,
    sweep_shm,
)

pytestmark = pytest.mark.timeout(120)

MP = grain.MultiprocessingOptions


class _ThreadWorker:
    """A worker thread as its ``PipePool`` sees it (no sentinel: its pipe's end says it ended)."""

    sentinel = None

    def __init__(self, thread: threading.Thread, prefix: str, stops: list[int], index: int):
        self.thread, self.prefix, self.stops, self.index = thread, prefix, stops, index

    def loss(self) -> str:
        return f"(thread worker {self.index}) ended its pipe"

    def stop(self, deadline: float) -> None:
        self.thread.join(max(0.0, deadline - time.monotonic()) + 5.0)
        self.stops.append(self.index)
        sweep_shm(self.prefix)


@dataclasses.dataclass
class PipeThreadRuntime:
    """Workers as threads over the pipe transport; ``end_after``: worker 1 closes its pipe after
    that many messages (a lost worker)."""

    end_after: int | None = None
    stops: list[int] = dataclasses.field(default_factory=list)

    def start_workers(self, job: WorkerJob) -> PipePool:
        pool = PipePool()
        for i in range(job.worker_count):
            conn, worker_conn = multiprocessing.Pipe(duplex=True)
            credits, worker_credits = socket.socketpair()
            credits.setblocking(False)
            prefix = new_shm_prefix()
            thread = threading.Thread(
                target=self._run, args=(job, i, worker_conn, worker_credits, prefix), daemon=True
            )
            thread.start()
            pool.attach(_ThreadWorker(thread, prefix, self.stops, i), conn, CreditSender(credits))
        return pool

    def _run(self, job: WorkerJob, i: int, conn, credits, prefix: str) -> None:
        endpoint = PipeEndpoint(conn, credits, prefix=prefix, consumer_pid=os.getpid())
        if self.end_after is not None and i == 1:
            endpoint = _EndsAfter(endpoint, self.end_after)
        try:
            WorkerLoop(job, i, endpoint).run()
        except (EOFError, OSError):
            pass  # the consumer closed the pipe, or this worker "died"
        finally:
            if isinstance(endpoint, PipeEndpoint):
                endpoint.close()  # its segments and both channels
            else:  # a worker that "died" unlinks nothing: the pool's stop() sweeps its segments
                conn.close()
                credits.close()


class _EndsAfter:
    """An endpoint that closes its pipe after ``n`` messages, as a dying worker would."""

    def __init__(self, inner: PipeEndpoint, n: int):
        self.inner, self.left = inner, n

    def send(self, message) -> None:
        if self.left <= 0:
            self.inner.conn.close()
            raise EOFError("ended")
        self.left -= 1
        self.inner.send(message)

    def receive(self, timeout):
        return self.inner.receive(timeout)


def _pipeline(n: int = 40) -> grain.IterDataset:
    return (
        grain.MapDataset.range(n)
        .seed(3)
        .shuffle()
        .map(lambda x: {"x": int(x), "big": np.full(1 << 14, x, np.int64)})
        .to_iter_dataset()
    )


def _xs(elements) -> list[int]:
    return [int(e["x"]) for e in elements]


def test_thread_workers_over_pipes_give_mp_prefetchs_elements_and_states():
    ref = list(_pipeline().mp_prefetch(MP(num_workers=2)))
    runtime = PipeThreadRuntime()
    with iter(_pipeline().mp_prefetch(MP(num_workers=2), runtime=runtime)) as it:
        head = [next(it) for _ in range(11)]
        state = it.get_state()
        rest = list(it)
    assert _xs(head + rest) == _xs(ref)
    for e in head + rest:
        assert int(e["big"][-1]) == e["x"] and e["big"].flags.writeable
    assert sorted(runtime.stops) == [0, 1]  # close() stopped each worker
    with iter(_pipeline().mp_prefetch(MP(num_workers=2))) as again:  # into worker processes
        again.set_state(state)
        assert _xs(again) == _xs(ref[11:])
    assert our_segments() == []


def test_a_worker_whose_pipe_ends_is_reported_with_its_loss():
    it = iter(_pipeline().mp_prefetch(MP(num_workers=2), runtime=PipeThreadRuntime(end_after=2)))
    with pytest.raises(WorkerError, match=r"thread worker 1\) ended its pipe"):
        for _ in it:
            pass
    it.close()
    assert our_segments() == []


def test_attach_after_close_is_refused_and_closes_what_it_was_given():
    pool = PipePool()
    pool.close()
    conn, other = multiprocessing.Pipe(duplex=True)
    credits, other_credits = socket.socketpair()
    with pytest.raises(RuntimeError, match="closed"):
        pool.attach(_ThreadWorker(threading.Thread(target=int), "x", [], 0), conn, CreditSender(credits))
    assert conn.closed and credits.fileno() == -1
    other.close()
    other_credits.close()
