"""Issue 30: a shuffled epoch over ArrayRecord files served over HTTP with a fixed latency per
request, read by our remote reader, by the download-then-read-locally workaround, and by the local
reader (array_record's C++ reader) on the same files; with each row's peak memory.

Setup: 4 files of ``RECORDS_PER_FILE`` records of 1 KiB (``group_size:1``), served by
``grain_core.testing.servers_asyncio.AsyncRangeServer`` in its own process on loopback (each answer
goes out ``latency`` after its request, a timer on the server's event loop, like a network round
trip; ``--server thread`` uses the thread-per-connection ``RangeHTTPServer`` instead, which costs
the shared cores about 3x more CPU per request). The server shares the reader's 2 cores here; a
real object store does not: the ``server`` column says what it took. Every row runs in
a fresh child process (``--row``), reads one epoch in a shuffled order, ``BATCH`` indices per
``__getitems__`` call, then a second epoch in the same process (indexes cached, connections kept:
the ``next`` columns), and reports the first epoch's records/s, the second's, the child's peak RSS
above its RSS before reading (index and caches included), the HTTP requests the server answered
per epoch, and the CPU seconds of the reading process (all threads) and of the server during the
row (both epochs); then the same per record over both epochs
(``us/rec``: the reader's CPU microseconds, ``srv us``: the server's) and the body bytes the
server sent per record (``KiB/rec``: with ``requests``, what the row's cost per record is made
of; docs/sources.md, "Where the time goes", reads them). The timed part starts after the imports
(fsspec's HTTP filesystem and aiohttp are imported first) and includes opening the files and
reading their indexes (a ``gc.collect()`` before the clock, in every row, takes the imports'
garbage out of it). The reader's range requests over these ``http://`` URLs go through
``grain_plugin_arrayrecord.http_ranges`` (keep-alive sockets, one epoll loop), not aiohttp.

Each row runs ``PASSES`` times (3), each pass in a fresh process against a fresh server; the
printed figures are those of the pass with the median rate, and the last column gives the range
of the passes' rates.

Rows (each with its rate as a share of the ``local`` row's, measured first in the same run):
  * ``local``: the local reader alone (no download; the reference of the shares);
  * ``memory``: the remote reader over the same files in fsspec's ``memory://`` filesystem (put
    there before the clock starts): its planning, coalescing, copying and decoding without HTTP
    (``KiB/rec`` is 0: no server);
  * ``requests``: no ArrayRecord at all: the reader's own request path
    (``remote.fetch_ranges``) for 1 KiB ranges 4 KiB apart (none coalesce), 128 in flight; its
    rate is requests/s, the most records/s a reader making one range request per record could
    reach with this client and server on these cores (its per-record columns are per request);
  * ``remote``: ``ArrayRecordDataSource`` over ``http://`` URLs (this plugin's reader);
  * ``remote, 4 threads``: the same batches, 4 ``__getitems__`` calls in flight at a time (as a
    pipeline's reading threads make them);
  * ``remote, pipeline``: the same through ``MapDataset.source(...).shuffle().to_iter_dataset()``
    (default ``ReadOptions``; the source's ``bulk_read_size`` gives it calls of 4,096 indices, less
    where 4 MiB of elements fill a chunk first: 3,968 of these records);
  * ``remote, pipeline, no threads``: the same with ``num_threads=0, prefetch_buffer_size=0``;
  * ``download + local``: ``fsspec`` copies the 4 files to a local directory first (the time
    counts), then the local reader reads them.

Coalescing flatters the ``remote`` rows: these files are small (4 x 8 MiB), so a call of 4,096
shuffled indices finds neighbours within ``remote.MAX_GAP`` (48 KiB) for most records and makes
about one request per 4 records (reading the holes between them: the ``KiB/rec`` column); over a
large dataset a shuffled call makes one request per record, so its rate is bounded by the
``requests`` row.

``python benchmarks/bench_remote.py`` prints the table (latencies 20 ms and 0; ``--rows`` and
``--latencies`` pick some, ``--server thread`` the other server); ``run.py`` calls
``remote_report`` (``nox -s bench -- -k remote`` runs only this file's rows)."""

from __future__ import annotations

import argparse
import gc
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
#: Indices per ``__getitems__`` call in the rows that call the source directly: what remote files
#: declare as their ``bulk_read_size`` (``remote.BULK_READ_SIZE``), which a pipeline's chunks also
#: get; the local row makes the same calls.
BATCH = 4096
LATENCIES = (0.02, 0.0)
#: Each row runs this many times, each in a fresh process; the printed pass is the one with the
#: median rate (one pass of array_record's C++ reader, the shares' reference, ranged over 1.6x in
#: three runs of this file on this host, minutes apart, while the remote rows moved by 4%).
PASSES = 3
ROWS = (
    "local",
    "memory",
    "requests",
    "remote",
    "remote, 4 threads",
    "remote, pipeline",
    "remote, pipeline, no threads",
    "download + local",
)
SERVERS = {"asyncio": "grain_core.testing.servers_asyncio", "thread": "grain_core.testing.servers"}


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


def _peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``: its own address space's, which ``exec`` starts afresh;
    ``ru_maxrss`` keeps the high-water mark of the process that forked it, so under
    ``benchmarks/run.py`` it gave the whole benchmark run's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # pragma: no cover


def _epoch(src, n: int, seed: int = 1) -> int:
    order = np.random.default_rng(seed).permutation(n)
    got = 0
    for s in range(0, n, BATCH):
        got += len(src.__getitems__(order[s : s + BATCH].tolist()))
    return got


def _row(row: str, url: str, local_dir: str, names: list[str]) -> dict:
    """One row, in this (child) process: its first epoch (timed from opening the files), then a
    second one in the same process (the same source or pipeline, another shuffle order where the
    row shuffles itself)."""
    from grain_plugin_arrayrecord import ArrayRecordDataSource

    import grain_core as grain

    if row != "local":
        # Importing aiohttp took seconds on a loaded machine: a once-per-process cost, not an
        # epoch's (the index reads, the connections and the first session remain timed).
        import fsspec.implementations.http  # noqa: F401

    if row == "memory":  # before the clock: the files in memory, the reader's work without HTTP
        import fsspec

        mem = fsspec.filesystem("memory")
        for n in names:
            mem.pipe(f"/bench_remote/{n}", Path(local_dir, n).read_bytes())
    urls = [f"{url}/{n}" for n in names]
    held: dict = {}  # what the first epoch opened, for the second

    def source(paths: list[str]):
        if "src" not in held:
            held["src"] = ArrayRecordDataSource(paths)
        return held["src"]

    def epoch(k: int) -> int:
        if row == "local":
            src = source([os.path.join(local_dir, n) for n in names])
            return _epoch(src, len(src), 1 + k)
        if row == "download + local":
            import fsspec

            if "dir" not in held:
                held["dir"] = tempfile.TemporaryDirectory()
                fs = fsspec.filesystem("http")
                for n in names:
                    fs.get(f"{url}/{n}", os.path.join(held["dir"].name, n))
            src = source([os.path.join(held["dir"].name, n) for n in names])
            return _epoch(src, len(src), 1 + k)
        if row in ("remote", "memory"):
            paths = urls if row == "remote" else [f"memory://bench_remote/{n}" for n in names]
            src = source(paths)
            return _epoch(src, len(src), 1 + k)
        if row == "remote, 4 threads":
            import concurrent.futures

            src = source(urls)
            n = len(src)
            order = np.random.default_rng(1 + k).permutation(n)
            batches = [order[s : s + BATCH].tolist() for s in range(0, n, BATCH)]
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                return sum(len(b) for b in pool.map(src.__getitems__, batches))
        if row in ("remote, pipeline", "remote, pipeline, no threads"):
            if "ds" not in held:
                options = grain.ReadOptions()
                if row.endswith("no threads"):
                    options = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
                src = source(urls)
                held["ds"] = grain.MapDataset.source(src).seed(1).shuffle().to_iter_dataset(options)
            return sum(1 for _ in held["ds"])
        if row == "requests":
            import fsspec
            from grain_plugin_arrayrecord import remote

            fs = fsspec.filesystem("http")
            n = FILES * RECORDS_PER_FILE // 4  # requests (rate: requests/s)
            starts = [(i // FILES) * 4 * RECORD_BYTES for i in range(n)]
            out = remote.fetch_ranges(  # the reader's own request path (http_ranges for http://)
                fs,
                [urls[i % FILES] for i in range(n)],
                starts,
                [s + RECORD_BYTES for s in starts],
                retry=remote.RetryPolicy(),
                concurrency=remote.CONCURRENCY,
            )
            assert all(len(b) == RECORD_BYTES for b in out)
            return n
        raise ValueError(row)

    # The imports' garbage is collected before the clock, in every row: otherwise the first full
    # collection (tens of ms after aiohttp's and fsspec's imports) falls inside the timed epoch.
    gc.collect()
    base = _rss_mb()
    cpu0 = _cpu_s(os.getpid())
    rates = []
    for k in range(1 if row == "requests" else 2):
        t0 = time.perf_counter()
        got = epoch(k)
        rates.append(got / (time.perf_counter() - t0))
        assert got == FILES * RECORDS_PER_FILE or row == "requests", got
    peak = _peak_rss_mb()
    cpu = _cpu_s(os.getpid()) - cpu0
    if "dir" in held:
        held["dir"].cleanup()
    return {
        "rate": rates[0],
        "next": rates[-1],
        "epochs": len(rates),
        "peak_mb": peak - base,
        "cpu_s": cpu,
        "records": got * len(rates),
    }


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(directory: Path, latency: float, server: str = "asyncio") -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", SERVERS[server], str(directory), "--latency", str(latency)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().split()  # "port <n>"
    if len(line) != 2 or line[0] != "port":
        proc.kill()
        raise RuntimeError(f"the range server did not start: {line}")
    return proc, f"http://127.0.0.1:{line[1]}"


def _stop(proc: subprocess.Popen) -> tuple[int, int]:
    """Stops the server; returns the requests it answered and the body bytes it sent (-1 where
    it does not count them; its CPU time is read before)."""
    out, _ = proc.communicate(input="", timeout=30)
    found = {w[0]: int(w[1]) for w in (line.split() for line in out.splitlines()) if len(w) == 2}
    return found.get("requests", -1), found.get("bytes", -1)


def remote_report(
    rows: tuple[str, ...] = ROWS,
    latencies: tuple[float, ...] = LATENCIES,
    server: str = "asyncio",
    passes: int = PASSES,
) -> None:
    """Prints records/s, the share of the local reader's rate (measured first, in this run), peak
    memory, requests and CPU seconds (the reading process's, all its threads; the server's while
    the row ran) for each row and latency: of the pass with the median rate among ``passes``
    passes of the row (each in a fresh process, against a fresh server), followed by the range of
    the passes' rates. On a shared machine the rate depends on the CPU share the two processes
    get; the CPU seconds much less."""
    d = scratch_dir("bench_remote_")
    _write(d)
    print(
        f"{'remote ArrayRecord: shuffled epoch, 4 x 8192 x 1 KiB, group_size:1':<66} "
        f"{'records/s':>10} {'x local':>7} {'next':>8} {'x local':>7} {'peak MB':>8} "
        f"{'requests':>9} {'CPU s':>6} {server + ' server':>14} {'us/rec':>7} {'srv us':>7} "
        f"{'KiB/rec':>7}  passes (records/s)"
    )
    local_rate = local_next = None
    for latency in latencies:
        for row in ("local", *[r for r in rows if r != "local"]):
            if row == "local" and local_rate is not None:
                continue
            if row == "memory" and latency != latencies[-1]:
                continue  # no server: once, beside the last latency's rows
            runs = [_pass(d, latency, server, row) for _ in range(max(1, passes))]
            runs = [r for r in runs if r is not None]
            if not runs:
                continue
            runs.sort(key=lambda r: r["rate"])
            r = runs[(len(runs) - 1) // 2]
            if row == "local":
                local_rate, local_next = r["rate"], r["next"]
            label = f"{row} ({latency * 1000:.0f} ms/request)" if row != "local" else row
            label = "remote, memory:// (no HTTP)" if row == "memory" else label
            label += " [requests/s]" if row == "requests" else ""
            share = r["rate"] / local_rate if local_rate else float("nan")
            share_next = r["next"] / local_next if local_next else float("nan")
            requests = r["requests"] // r["epochs"] if r["requests"] >= 0 else -1
            n = max(r.get("records", 1), 1)
            per = (
                f"{r['cpu_s'] / n * 1e6:>7.1f} {r['server_s'] / n * 1e6:>7.1f} "
                f"{r['sent'] / n / 1024:>7.1f}"
            )
            spread = f"{runs[0]['rate']:,.0f}-{runs[-1]['rate']:,.0f}"
            print(
                f"  {label:<64} {r['rate']:>10,.0f} {share:>7.3f} {r['next']:>8,.0f} "
                f"{share_next:>7.3f} {r['peak_mb']:>8.0f} {requests:>9} {r['cpu_s']:>6.1f} "
                f"{r['server_s']:>14.1f} {per}  {spread}",
                flush=True,
            )


def _pass(d: Path, latency: float, server: str, row: str) -> dict | None:
    """One pass of ``row`` in a fresh process against a fresh server: ``_row``'s figures plus the
    server's CPU seconds, requests and body bytes; None (reported) when the process failed."""
    proc, url = _serve(d, latency, server)
    server0 = _cpu_s(proc.pid)
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--row", row, "--url", url, "--dir", str(d)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server_s = _cpu_s(proc.pid) - server0
        requests, sent = _stop(proc)
    if out.returncode:
        print(f"{row}: failed\n{out.stderr[-2000:]}")
        return None
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r.update(server_s=server_s, requests=requests, sent=sent)
    return r


WORKLOADS: list = []
REPORTS = [remote_report]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--row")
    parser.add_argument("--url")
    parser.add_argument("--dir")
    parser.add_argument("--rows", help="rows separated by semicolons (default: all)")
    parser.add_argument("--latencies", help="comma-separated seconds (default: 0.02,0)")
    parser.add_argument("--server", choices=sorted(SERVERS), default="asyncio")
    parser.add_argument("--passes", type=int, default=PASSES, help="passes per row (median shown)")
    args = parser.parse_args()
    if args.row:
        names = sorted(p.name for p in Path(args.dir).glob("*.array_record"))
        print(json.dumps(_row(args.row, args.url, args.dir, names)))
    else:
        remote_report(
            tuple(args.rows.split(";")) if args.rows else ROWS,
            tuple(float(x) for x in args.latencies.split(",")) if args.latencies else LATENCIES,
            args.server,
            args.passes,
        )
