"""Every hook in ``grain_core.plugins.hookspecs`` has a heading in ``docs/hooks.md`` (with its
signature) and a test named ``test_hook_<name>`` in this file, as datasette checks its hooks. The
hook tests use the installed test-only plugin ``grain-plugin-testdummy``, a real distribution."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grain_core as grain
from grain_core import plugins
from grain_core.plugins.hook_validation import hook_signatures

ROOT = Path(__file__).resolve().parents[1]


def test_every_hook_has_a_doc_heading_with_its_signature():
    headings = re.findall(r"^## (\w+)(\(.*\))\s*$", (ROOT / "docs" / "hooks.md").read_text(), re.M)
    assert dict(headings) == hook_signatures()


def test_every_hook_has_a_test():
    tree = ast.parse(Path(__file__).read_text())
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [h for h in hook_signatures() if f"test_hook_{h}" not in tests]
    assert not missing, f"hooks without a test_hook_<name> in {__file__}: {missing}"


def test_hook_register_sources(fresh_plugins):
    from grain_plugin_testdummy.plugin import SquaresSource

    impls = [i.plugin_name for i in fresh_plugins.pm.hook.register_sources.get_hookimpls()]
    assert "testdummy" in impls
    assert grain.sources.SquaresSource is SquaresSource is grain.SquaresSource
    assert "SquaresSource" in plugins.provided_names("sources")


def test_hook_register_transforms(fresh_plugins):
    from grain_plugin_testdummy.plugin import RepeatEachIterDataset

    assert grain.experimental.RepeatEachIterDataset is RepeatEachIterDataset
    ds = grain.MapDataset.source([1, 2]).to_iter_dataset().pipe(RepeatEachIterDataset, times=2)
    assert list(ds) == [1, 1, 2, 2]


def test_hook_register_dataset_factories(fresh_plugins):
    assert list(grain.MapDataset.squares(4)) == [0, 1, 4, 9]
    assert "squares" in dir(grain.MapDataset)


def test_hook_register_runtimes(fresh_plugins):
    import types

    from grain_core.plugins import hookimpl
    from grain_core.runtime.processes import ProcessRuntime

    def spawned():
        return ProcessRuntime(start_method="spawn")

    mod = types.ModuleType("spawn_runtime_plugin")
    mod.register_runtimes = hookimpl(lambda register: register(spawned))
    plugins.register(mod)
    try:
        assert "spawned" in plugins.provided_names("runtimes")
        ds = grain.MapDataset.range(7).to_iter_dataset().mp_prefetch(
            grain.MultiprocessingOptions(num_workers=2), runtime="spawned"
        )
        assert ds.runtime == ProcessRuntime(start_method="spawn")
        assert list(ds) == list(range(7))
    finally:
        plugins.unregister("spawn_runtime_plugin")
