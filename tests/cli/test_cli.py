"""The grain-core command line, run as ``python -m grain_core`` in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

PIPELINE = textwrap.dedent(
    """
    import numpy as np
    import grain_core as grain

    def make_dataset():
        return (
            grain.MapDataset.range(500)
            .seed(0)
            .shuffle()
            .map(lambda x: {"x": np.full((4,), x, np.float32), "name": "ab"})
            .batch(8)
            .to_iter_dataset(grain.ReadOptions(num_threads=1))
        )

    DATASET = make_dataset()
    NOT_A_DATASET = 3

    def _sleepy(x):
        import time
        time.sleep(0.002)
        return x

    SLOW = grain.MapDataset.range(10**6).map(_sleepy).to_iter_dataset(grain.ReadOptions(num_threads=0))
    """
)


def _env(extra=None):
    env = dict(os.environ)
    env["GRAIN_CORE_BLOCK_PLUGINS"] = "broken"  # the kernel session installs a deliberately broken one
    env.update(extra or {})
    return env


def run(*args, cwd=None, env=None, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "grain_core", *args],
        capture_output=True, text=True, cwd=cwd, env=_env(env), timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "pipe.py"
    path.write_text(PIPELINE)
    return path


def _fits(text, columns=100):
    long = [line for line in text.splitlines() if len(line) > columns]
    assert not long, f"lines over {columns} columns: {long}"


def test_version():
    from grain_core.cli._about import kernel_version

    out = run("--version").stdout.strip()
    assert out == f"grain-core-kernel {kernel_version()}"
    import importlib.metadata

    assert kernel_version() == importlib.metadata.version("grain-core-kernel")


def test_plugins_lists_range():
    out = run("plugins").stdout
    _fits(out)
    assert "grain-plugin-range" in out and "RangeDataSource" in out
    data = json.loads(run("plugins", "--json").stdout)
    assert any(p["distribution"] == "grain-plugin-range" and p["status"] == "loaded" for p in data)


def test_bench_steps_json(target):
    data = json.loads(run("bench", f"{target}:make_dataset", "--steps", "20", "--json").stdout)
    assert data["elements"] == 20
    assert data["elements_per_s"] > 0
    # float32[8,4] + a <U2[8] array, in a dict: grain_core.tree.nbytes counts the dict itself too
    assert data["bytes"] == 20 * (8 * 4 * 4 + 8 * 2 * 4 + sys.getsizeof({"x": 0, "name": 0}))
    assert data["bytes_per_s"] > 0


def test_bench_text_with_stats(target):
    proc = run("bench", f"{target}:DATASET", "--steps", "10", "--stats")
    assert "elements/s:" in proc.stdout and "bytes/s:" in proc.stdout
    assert "slowest stage:" in proc.stdout
    _fits(proc.stdout)


def test_bench_progress_is_plain_lines_when_not_a_terminal(target):
    # Runs at least --seconds (>= 1 s, when progress starts): the last element always reports.
    proc = run("bench", f"{target}:SLOW", "--seconds", "1.2")
    assert "\r" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and all(re.fullmatch(r"bench: [\d,]+ elements  .* elements/s  .*/s  [\d.]+ s", x)
                         for x in lines), proc.stderr
    quiet = run("bench", f"{target}:SLOW", "--seconds", "1.2", "--quiet")
    assert quiet.stderr == ""


def test_bench_module_target(target):
    proc = run("bench", "pipe:make_dataset", "--steps", "5", "--json", cwd=target.parent,
               env={"PYTHONPATH": str(target.parent)})
    assert json.loads(proc.stdout)["elements"] == 5


def test_inspect_text(target):
    out = run("inspect", f"{target}:make_dataset", "--steps", "5").stdout
    for stage in ("PrefetchIterDataset", "BatchMapDataset", "ShuffleMapDataset", "SourceMapDataset"):
        assert stage in out
    assert "grain-plugin-range" in out  # the range source's provider
    assert "num_threads" in out  # options
    assert "['x']: ndarray shape=(8, 4) dtype=float32" in out
    assert "Per-stage timings" in out and "slowest stage:" in out
    _fits(out)


def test_inspect_json(target):
    data = json.loads(run("inspect", f"{target}:make_dataset", "--json").stdout)
    tree = data["tree"]
    assert tree["stage"].startswith("PrefetchIterDataset") and tree["provider"] == "grain-core-kernel"
    assert tree["options"]["read_options"]["num_threads"] == 1
    spec = {leaf["path"]: leaf for leaf in data["element_spec"]}
    assert spec["['x']"]["shape"] == [8, 4] and spec["['x']"]["dtype"] == "float32"
    assert data["stats"]["slowest"]
    assert len(data["stats"]["stages"]) == 6


@pytest.mark.parametrize(
    "bad, message",
    [("nope.py:x", "no such file"), ("{target}:missing", "no attribute"),
     ("{target}:NOT_A_DATASET", "not a MapDataset"), ("justaname", "TARGET must look like")],
)
def test_bad_targets(target, bad, message):
    proc = run("inspect", bad.format(target=target), check=False)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_new_plugin_skeleton_passes_its_tests(tmp_path):
    out = run("new-plugin", "demo-thing", "--dir", str(tmp_path)).stdout
    root = tmp_path / "grain-plugin-demo-thing"
    assert str(root) in out
    import tomllib

    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "grain-plugin-demo-thing"
    assert "grain-core-kernel>=0.1" in meta["project"]["dependencies"]
    assert meta["project"]["entry-points"]["grain_core"] == {"demo_thing": "grain_plugin_demo_thing.plugin"}
    # Not installed: the skeleton's conftest registers the plugin module explicitly.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "tests"],
        cwd=root, capture_output=True, text=True, timeout=300,
        env=_env({"PYTHONPATH": str(root)}),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout


def test_new_plugin_refuses_bad_names_and_existing_dirs(tmp_path):
    assert run("new-plugin", "9bad", "--dir", str(tmp_path), check=False).returncode == 2
    run("new-plugin", "ok", "--dir", str(tmp_path))
    proc = run("new-plugin", "ok", "--dir", str(tmp_path), check=False)
    assert proc.returncode == 2 and "exists" in proc.stderr


MP_PIPELINE = textwrap.dedent(
    """
    import time
    import grain_core as grain

    def slow(x):
        time.sleep(0.01)
        return x

    def make_dataset():
        return (
            grain.MapDataset.range(100)
            .map(slow)
            .to_iter_dataset(grain.ReadOptions(num_threads=1))
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
        )
    """
)


def test_inspect_shows_stages_run_in_mp_prefetch_workers(tmp_path):
    path = tmp_path / "mp_pipe.py"  # a file target: its functions must reach the workers
    path.write_text(MP_PIPELINE)
    data = json.loads(
        run("inspect", f"{path}:make_dataset", "--steps", "30", "--seconds", "600", "--json").stdout
    )
    assert data["error"] is None
    stages = data["stats"]["stages"]
    assert stages[0]["name"].startswith("MultiprocessPrefetch")
    assert stages[0]["workers"] == 0
    in_workers = {s["name"].split("(")[0]: s for s in stages if s["workers"]}
    assert set(in_workers) == {"PrefetchIterDataset", "MapMapDataset", "SourceMapDataset"}
    assert all(s["workers"] == 2 and s["elements"] >= 15 for s in in_workers.values())
    slowest = max(stages, key=lambda s: s["self_s"])  # which one depends on load: not asserted
    assert data["stats"]["slowest"] == slowest["name"]
    text = run("inspect", f"{path}:make_dataset", "--steps", "10").stdout
    assert "[2 workers]" in text
    _fits(text)


def test_stats_command(tmp_path):
    path = tmp_path / "mp_pipe.py"
    path.write_text(MP_PIPELINE)
    data = json.loads(run("stats", f"{path}:make_dataset", "--steps", "12", "--json").stdout)
    assert data["stages"][0]["name"].startswith("MultiprocessPrefetch")
    assert data["stages"][0]["elements"] == 12
    assert {s["name"].split("(")[0] for s in data["stages"] if s["workers"] == 2} == {
        "PrefetchIterDataset", "MapMapDataset", "SourceMapDataset"}
    text = run("stats", f"{path}:make_dataset", "--steps", "12").stdout
    assert text.startswith("12 elements in ")
    for name in ("MultiprocessPrefetchIterDataset", "MapMapDataset", "[2 workers]", "elem/s",
                 "slowest stage:"):
        assert name in text
    _fits(text)


def test_visualize_command(target, tmp_path):
    text = run("visualize", f"{target}:make_dataset").stdout
    assert text.index("SourceMapDataset") < text.index("BatchMapDataset")
    assert run("visualize", f"{target}:make_dataset", "--format", "mermaid").stdout.startswith(
        "flowchart")
    svg = tmp_path / "p.svg"
    assert run("visualize", f"{target}:make_dataset", "-o", str(svg)).stdout.strip() == f"wrote {svg}"
    assert "<svg" in svg.read_text() and "SourceMapDataset" in svg.read_text()
    bad = run("visualize", f"{target}:make_dataset", "-o", str(tmp_path / "no" / "p.svg"), check=False)
    assert bad.returncode == 2 and "no such directory" in bad.stderr
    assert not (tmp_path / "no").exists()
    bad = run("visualize", f"{target}:make_dataset", "--format", "png", check=False)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_wide_pipelines_fit_100_columns(tmp_path):
    path = tmp_path / "a_rather_long_file_name_for_a_pipeline_module_that_keeps_going.py"
    path.write_text(textwrap.dedent(
        """
        import numpy as np
        import grain_core as grain

        def a_transformation_function_with_a_very_long_descriptive_name_indeed(x):
            return {"features": np.zeros((3, 5), np.float32), "a_long_feature_name": {"nested": x}}

        def make_dataset():
            ds = grain.MapDataset.range(400)
            for _ in range(8):
                ds = ds.map(a_transformation_function_with_a_very_long_descriptive_name_indeed)
                ds = ds.map(lambda e: e["a_long_feature_name"]["nested"])
            return ds.map(a_transformation_function_with_a_very_long_descriptive_name_indeed).to_iter_dataset(
                grain.ReadOptions(num_threads=3, prefetch_buffer_size=77))
        """
    ))
    for cmd in ("inspect", "stats"):
        out = run(cmd, f"{path}:make_dataset", "--steps", "5").stdout
        assert "MapMapDataset(a_transformation" in out  # long names are folded, not cut
        _fits(out)
