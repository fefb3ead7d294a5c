"""Issue 30: a shuffled epoch over ArrayRecord files served over HTTP with a fixed latency per
request, read by our remote reader, by the download-then-read-locally workaround, and by the local
reader (array_record's C++ reader) on the same files; with each row's peak memory.

Setup: 4 files of ``RECORDS_PER_FILE`` records of 1 KiB (``group_size:1``), served by
``grain_core.testing.servers.RangeHTTPServer`` in its own process on loopback (each request waits
``latency`` before it is answered, in its own thread, like a network round trip). Every row runs in
a fresh child process (``--row``), reads one epoch in a shuffled order, ``BATCH`` indices per
``__getitems__`` call, and reports records/s, the child's peak RSS above its RSS before reading
(index and caches included), the number of HTTP requests the server answered, and the CPU seconds
of the reading process (all threads) and of the server during the row. The timed part
starts after the imports (fsspec's HTTP filesystem and aiohttp are imported first) and includes
opening the files and reading their indexes.

Rows:
  * ``remote``: ``ArrayRecordDataSource`` over ``http://`` URLs (this plugin's reader);
  * ``remote, 4 threads``: the same batches, 4 ``__getitems__`` calls in flight at a time (as a
    pipeline's reading threads make them);
  * ``remote, pipeline``: the same through ``MapDataset.source(...).shuffle().to_iter_dataset()``;
  * ``download + local``: ``fsspec`` copies the 4 files to a local directory first (the time
    counts), then the local reader reads them;
  * ``local``: the local reader alone (no download).

``python benchmarks/bench_remote.py`` prints the table (latencies 20 ms and 0); ``run.py`` calls
``remote_report`` (``nox -s bench -- -k remote`` runs only this file's rows)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from harness import scratch_dir  # noqa: E402

FILES = 4
RECORDS_PER_FILE = 8192
RECORD_BYTES = 1024
BATCH = 1024
LATENCIES = (0.02, 0.0)


def _write(directory: Path) -> list[str]:
    from array_record.python.array_record_module import ArrayRecordWriter

    rng = np.random.default_rng(0)
    names = []
    for f in range(FILES):
        name = f"data-{f:05d}-of-{FILES:05d}.array_record"
        w = ArrayRecordWriter(str(directory / name), "group_size:1")
        for _ in range(RECORDS_PER_FILE):
            w.write(rng.bytes(RECORD_BYTES))
        w.close()
        names.append(name)
    return names


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _epoch(src, n: int) -> int:
    order = np.random.default_rng(1).permutation(n)
    got = 0
    for s in range(0, n, BATCH):
        got += len(src.__getitems__(order[s : s + BATCH].tolist()))
    return got


def _row(row: str, url: str, local_dir: str, names: list[str]) -> dict:
    """One row, in this (child) process."""
    from grain_plugin_arrayrecord import ArrayRecordDataSource

    import grain_core as grain

    if row != "local":
        # Importing aiohttp took seconds on a loaded machine: a once-per-process cost, not an
        # epoch's (the index reads, the connections and the first session remain timed).
        import fsspec.implementations.http  # noqa: F401

    base = _rss_mb()
    cpu0 = _cpu_s(os.getpid())
    t0 = time.perf_counter()
    if row == "local":
        src = ArrayRecordDataSource([os.path.join(local_dir, n) for n in names])
        got = _epoch(src, len(src))
    elif row == "download + local":
        import fsspec

        fs = fsspec.filesystem("http")
        with tempfile.TemporaryDirectory() as d:
            for n in names:
                fs.get(f"{url}/{n}", os.path.join(d, n))
            src = ArrayRecordDataSource([os.path.join(d, n) for n in names])
            got = _epoch(src, len(src))
            src.close()
    elif row == "remote":
        src = ArrayRecordDataSource([f"{url}/{n}" for n in names])
        got = _epoch(src, len(src))
    elif row == "remote, 4 threads":
        import concurrent.futures

        src = ArrayRecordDataSource([f"{url}/{n}" for n in names])
        n = len(src)
        order = np.random.default_rng(1).permutation(n)
        batches = [order[s : s + BATCH].tolist() for s in range(0, n, BATCH)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = sum(len(b) for b in pool.map(src.__getitems__, batches))
    elif row == "remote, pipeline":
        src = ArrayRecordDataSource([f"{url}/{n}" for n in names])
        ds = grain.MapDataset.source(src).seed(1).shuffle().to_iter_dataset()
        got = sum(1 for _ in ds)
    else:
        raise ValueError(row)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert got == FILES * RECORDS_PER_FILE, got
    cpu = _cpu_s(os.getpid()) - cpu0
    return {"rate": got / seconds, "seconds": seconds, "peak_mb": peak - base, "cpu_s": cpu}


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(directory: Path, latency: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "grain_core.testing.servers", str(directory), "--latency", str(latency)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().split()  # "port <n>"
    if len(line) != 2 or line[0] != "port":
        proc.kill()
        raise RuntimeError(f"the range server did not start: {line}")
    return proc, f"http://127.0.0.1:{line[1]}"


def _stop(proc: subprocess.Popen) -> int:
    """Stops the server; returns the requests it answered (its CPU time is read before)."""
    out, _ = proc.communicate(input="", timeout=30)
    words = out.split()
    return int(words[-1]) if len(words) >= 2 and words[-2] == "requests" else -1


def remote_report() -> None:
    """Prints records/s, peak memory, requests and CPU seconds (the reading process's, all its
    threads; the server's while the row ran) for each row and latency. On a shared machine the
    rate depends on the CPU share the two processes get; the CPU seconds much less."""
    d = scratch_dir("bench_remote_")
    _write(d)
    print(
        f"{'remote ArrayRecord: shuffled epoch, 4 x 8192 x 1 KiB, group_size:1':<66} "
        f"{'records/s':>10} {'peak MB':>8} {'requests':>9} {'CPU s':>6} {'server':>6}"
    )
    for latency in LATENCIES:
        for row in ("remote", "remote, 4 threads", "remote, pipeline", "download + local", "local"):
            if row == "local" and latency != LATENCIES[0]:
                continue
            proc, url = _serve(d, latency)
            server0 = _cpu_s(proc.pid)
            try:
                out = subprocess.run(
                    [sys.executable, __file__, "--row", row, "--url", url, "--dir", str(d)],
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
            finally:
                server = _cpu_s(proc.pid) - server0
                requests = _stop(proc)
            if out.returncode:
                print(f"{row}: failed\n{out.stderr[-2000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            label = f"{row} ({latency * 1000:.0f} ms/request)" if row != "local" else row
            print(
                f"  {label:<64} {r['rate']:>10,.0f} {r['peak_mb']:>8.0f} {requests:>9} "
                f"{r['cpu_s']:>6.1f} {server:>6.1f}",
                flush=True,
            )


WORKLOADS: list = []
REPORTS = [remote_report]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--row")
    parser.add_argument("--url")
    parser.add_argument("--dir")
    args = parser.parse_args()
    if args.row:
        names = sorted(p.name for p in Path(args.dir).glob("*.array_record"))
        print(json.dumps(_row(args.row, args.url, args.dir, names)))
    else:
        remote_report()
