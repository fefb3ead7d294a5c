"""A MaxText-style input pipeline, written against google grain and run unmodified on grain_core.

The script below imports ``grain.python as grain`` and ``from grain.experimental import
ElasticIterator`` at module top, as MaxText's ``input_pipeline/_grain_data_processing.py`` does, and
builds its elastic path: ArrayRecord files -> ``MapDataset.source`` -> shuffle -> repeat -> parse
-> ``ElasticIterator`` (sharding and batching, worker processes). It runs under
``python -m grain_core.compat run``: first as 4 hosts that each read 3 steps and save their state,
then as 2 hosts that restore the state and read the rest. Every record must be read exactly once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from array_record.python.array_record_module import ArrayRecordWriter

SCRIPT = textwrap.dedent(
    """
    import glob
    import json
    import sys

    import grain.python as grain
    from grain.experimental import ElasticIterator


    def get_datasets(pattern, shuffle_seed):
        source = grain.ArrayRecordDataSource(sorted(glob.glob(pattern)))
        dataset = grain.MapDataset.source(source)
        dataset = dataset.shuffle(seed=shuffle_seed)
        return dataset.repeat(1)


    class Parse(grain.MapTransform):
        def map(self, element):
            return {"inputs": int(element.decode().split()[1])}


    def make_iterator(data_dir, host, hosts, global_batch):
        ds = get_datasets(data_dir + "/*.array_record", shuffle_seed=7).map(Parse())
        return ElasticIterator(
            ds,
            global_batch_size=global_batch,
            shard_options=grain.ShardOptions(shard_index=host, shard_count=hosts),
            read_options=grain.ReadOptions(num_threads=2, prefetch_buffer_size=8),
            multiprocessing_options=grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=1),
        )


    data_dir, phase = sys.argv[1], sys.argv[2]
    out = {"seen": []}
    if phase == "before":
        for host in range(4):
            it = make_iterator(data_dir, host, 4, 16)
            for _ in range(3):
                out["seen"] += next(it)["inputs"].tolist()
            out["state"] = it.get_state()
            it.close()
    else:
        state = json.loads(sys.argv[3])
        for host in range(2):
            it = make_iterator(data_dir, host, 2, 16)
            it.set_state(state)
            for batch in it:
                out["seen"] += batch["inputs"].tolist()
            it.close()
    print(json.dumps(out))
    """
)


def _run(tmp_path, *args):
    proc = subprocess.run(
        [sys.executable, "-m", "grain_core.compat", "run", str(tmp_path / "pipeline.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_maxtext_style_elastic_pipeline_runs_unmodified_and_resumes_on_fewer_hosts(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    n = 0
    for f in range(3):
        w = ArrayRecordWriter(str(data / f"shard-{f}.array_record"), "group_size:1")
        for _ in range(40):
            w.write(f"record {n}".encode())
            n += 1
        w.close()
    (tmp_path / "pipeline.py").write_text(SCRIPT)
    before = _run(tmp_path, str(data), "before")
    assert before["state"]["global_next_index"] == 3 * 16
    after = _run(tmp_path, str(data), "after", json.dumps(before["state"]))
    seen = before["seen"] + after["seen"]
    assert len(seen) == len(set(seen))
    # All 120 records but the final incomplete global batch (120 = 7 * 16 + 8).
    assert len(seen) == 112 and set(seen) <= set(range(120))
