"""Chaos soak (``nox -s soak -- --minutes 10``): exactly-once under worker kills, Ctrl-C and
restores into fresh processes with other worker counts; then open/iterate/close cycles that must
leave nothing behind.

Part 1. A pipeline of ``--elements`` (default 10**6) integers: ``--shards`` ranges, each
``map`` -> ``to_iter_dataset`` -> ``mp_prefetch(K workers)``, interleaved by the interleave plugin
(``cycle_length`` 2, so two shards' workers run at a time). Its *plain order* is the same pipeline
read in process (no workers). The run is a chain of *segments*, each a fresh Python process given
the state the previous one ended with and a worker count different from the previous one's. In a
segment, at random points:

* Ctrl-C: a real ``SIGALRM`` interrupt (``grain_core.testing.Interrupter``) lands inside
  grain_core or the plugin during ``next()``; the loop calls ``next()`` again;
* a worker is killed (``SIGKILL``); the segment then closes its iterator, opens a new one and
  restores the last checkpoint it took, dropping what it read since (as a training job restarts
  from its checkpoint);
* a checkpoint is taken (``get_state()``), itself under interrupts.

The runner checks every element each segment returns against the plain order, in order: every
element exactly once, none lost, none repeated, none out of place.

Part 2. ``--cycles`` (default 1,000) times: open the pipeline (2 workers), read a random number of
elements, close it. Afterwards no process, thread, file descriptor or ``/dev/shm`` segment of this
job may be left beyond those of the first cycle's start (the forkserver stays, as designed).

Bounded: the whole run stops at ``--minutes`` (default 10, at most 120); what was done by then is
checked and reported. Prints one JSON summary line at the end (the figures docs/reliability.md
quotes); exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grain_core as grain

MAX_MINUTES = 120.0
SHM_DIR = Path("/dev/shm")


def _value(x: int) -> int:
    return x


def build(elements: int, shards: int, workers: int) -> grain.IterDataset:
    """The soak pipeline with ``workers`` per shard (0: all in process: the plain order)."""
    bounds = [elements * i // shards for i in range(shards + 1)]
    parts = []
    for lo, hi in zip(bounds, bounds[1:]):
        ds = grain.MapDataset.range(lo, hi).map(_value).to_iter_dataset()
        if workers:
            ds = ds.mp_prefetch(
                grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=16)
            )
        parts.append(ds)
    return grain.experimental.InterleaveIterDataset(parts, cycle_length=2)


# --- processes of this job ------------------------------------------------------------------------


def _children(pid: int) -> dict[int, list[int]]:
    """Every process's children, from /proc (Linux)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def descendants(pid: int | None = None) -> list[int]:
    """The pids of all descendants of ``pid`` (default: this process)."""
    kids = _children(0)
    out, todo = [], [os.getpid() if pid is None else pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def workers_of_this_job() -> list[int]:
    """Worker processes: descendants that are not direct children (those are the forkserver and
    resource tracker; workers are the forkserver's children)."""
    direct = set(_children(0).get(os.getpid(), []))
    return [p for p in descendants() if p not in direct]


def shm_segments() -> list[str]:
    prefix = f"gcrt{os.getpid()}x"
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))
    except OSError:
        return []


def leftovers() -> dict[str, Any]:
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": sorted(t.name for t in threading.enumerate()),
        "processes": len(descendants()),
        "shm": shm_segments(),
    }


# --- part 1: one segment (run in a fresh process) ---------------------------------------------------


def run_segment(args: argparse.Namespace) -> None:
    import grain_plugin_interleave

    from grain_core.runtime.api import WorkerError
    from grain_core.testing import Interrupter

    job = json.loads(Path(args.segment).read_text())
    rng = random.Random(job["seed"])
    ds = build(job["elements"], job["shards"], job["workers"])
    deadline = time.monotonic() + job["seconds"]
    it = iter(ds)
    if job["state"] is not None:
        it.set_state(job["state"])
    checkpoint = (0, job["state"] if job["state"] is not None else it.get_state())
    out: list[int] = []
    stats = {"interrupts": 0, "kills": 0, "restores": 0, "checkpoints": 0}
    next_kill = rng.randint(200, 20000)
    next_ckpt = rng.randint(1, 5000)
    intr = Interrupter(packages=(grain, grain_plugin_interleave), interval=0.001)
    done = False
    with intr:
        while len(out) < job["count"] and time.monotonic() < deadline:
            if len(out) >= next_kill:
                next_kill = len(out) + rng.randint(2000, 40000)
                victims = workers_of_this_job()
                if victims:
                    os.kill(rng.choice(victims), signal.SIGKILL)
                    stats["kills"] += 1
            if len(out) >= next_ckpt:
                next_ckpt = len(out) + rng.randint(1, 5000)
                while True:
                    intr.armed = rng.random() < 0.3
                    try:
                        state = it.get_state()
                    except KeyboardInterrupt:
                        continue
                    finally:
                        intr.armed = False
                    break
                checkpoint = (len(out), state)
                stats["checkpoints"] += 1
            intr.armed = rng.random() < 0.02
            try:
                x = next(it)
            except KeyboardInterrupt:
                continue
            except StopIteration:
                done = True
                break
            except Exception as e:  # a killed worker: back to the last checkpoint
                intr.armed = False
                if not isinstance(e, WorkerError):
                    raise
                it.close()
                it = iter(ds)
                it.set_state(checkpoint[1])
                del out[checkpoint[0] :]
                stats["restores"] += 1
                continue
            finally:
                intr.armed = False
            out.append(x)
        stats["interrupts"] = intr.raised
        final = it.get_state()
    it.close()
    Path(job["result"]).write_text(
        json.dumps({"elements": out, "state": final, "done": done, "stats": stats})
    )


# --- part 1: the runner ---------------------------------------------------------------------------


def soak(args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    rng = random.Random(args.seed)
    plain = iter(build(args.elements, args.shards, 0))
    checked, segments = 0, 0
    totals = {"interrupts": 0, "kills": 0, "restores": 0, "checkpoints": 0}
    worker_counts: list[int] = []
    state = None
    workers = 0
    done = False
    with tempfile.TemporaryDirectory(prefix="grain_soak_") as tmp:
        while not done and time.monotonic() < deadline - 5:
            workers = rng.choice([k for k in (1, 2, 3) if k != workers])
            worker_counts.append(workers)
            job = {
                "elements": args.elements,
                "shards": args.shards,
                "workers": workers,
                "state": state,
                "seed": rng.randrange(2**31),
                "count": rng.randint(20000, 200000),
                "seconds": max(1.0, min(120.0, deadline - time.monotonic() - 5)),
                "result": os.path.join(tmp, f"result{segments}.json"),
            }
            spec = os.path.join(tmp, f"job{segments}.json")
            Path(spec).write_text(json.dumps(job))
            subprocess.run(
                [sys.executable, __file__, "--segment", spec],
                check=True,
                timeout=max(30.0, deadline - time.monotonic() + 60),
            )
            result = json.loads(Path(job["result"]).read_text())
            for i, x in enumerate(result["elements"]):
                want = next(plain)
                if x != want:
                    raise AssertionError(
                        f"segment {segments} (workers={workers}): element {checked + i} is {x}, "
                        f"the plain order has {want} there"
                    )
            checked += len(result["elements"])
            if result["done"]:
                if next(plain, None) is not None:
                    raise AssertionError(f"the run ended after {checked} elements, early")
                done = True
            state = result["state"]
            segments += 1
            for k in totals:
                totals[k] += result["stats"][k]
    return {
        "elements_checked": checked,
        "elements_total": args.elements,
        "completed": done,
        "segments": segments,
        "worker_counts": worker_counts,
        **totals,
    }


# --- part 2: open/iterate/close cycles -----------------------------------------------------------


def cycles(args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    rng = random.Random(args.seed + 1)
    ds = build(20000, 4, 2)
    it = iter(ds)
    next(it)
    it.close()
    time.sleep(0.5)
    base = leftovers()
    done = 0
    for _ in range(args.cycles):
        if time.monotonic() >= deadline:
            break
        it = iter(ds)
        for _ in range(rng.randint(0, 300)):
            next(it)
        it.close()
        done += 1
    # Closed workers exit within a bounded time (close escalates to SIGKILL after 1.5 s).
    end = time.monotonic() + 10
    while time.monotonic() < end:
        now = leftovers()
        if now["processes"] <= base["processes"] and not now["shm"]:
            break
        time.sleep(0.2)
    now = leftovers()
    return {
        "cycles": done,
        "cycles_asked": args.cycles,
        "before": {**base, "threads": len(base["threads"])},
        "after": {**now, "threads": len(now["threads"])},
        "left_fds": now["fds"] - base["fds"],
        "left_threads": sorted(set(now["threads"]) - set(base["threads"])),
        "left_processes": now["processes"] - base["processes"],
        "left_shm": now["shm"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="total time (at most 120)")
    p.add_argument("--elements", type=int, default=10**6)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--cycles", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--segment", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.segment:
        run_segment(args)
        return 0
    if not 0 < args.minutes <= MAX_MINUTES:
        p.error(f"--minutes must be in (0, {MAX_MINUTES:g}], got {args.minutes}")
    start = time.monotonic()
    end = start + 60 * args.minutes
    # Part 1 gets about 70% of the time, the cycles the rest.
    summary = {"soak": soak(args, start + 0.7 * (end - start))}
    t1 = time.monotonic()
    summary["cycles"] = cycles(args, end)
    summary["seconds"] = {"soak": round(t1 - start, 1), "cycles": round(time.monotonic() - t1, 1)}
    c = summary["cycles"]
    ok = not (c["left_fds"] > 0 or c["left_threads"] or c["left_processes"] > 0 or c["left_shm"])
    summary["ok"] = ok
    print(json.dumps(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
