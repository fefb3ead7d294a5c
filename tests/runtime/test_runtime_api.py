"""The runtime API is enough to write a runtime: the "threads as workers" runtime of
docs/writing-plugins.md ("Write a runtime"), built only on documented names, passes the same order,
state and elastic checks as the process runtime, and checkpoints move between the two."""

from __future__ import annotations

import pathlib
import re
import types

import pytest

import grain_core as grain
from grain_core import plugins
from grain_core.plugins import hookimpl, registry
from grain_core.runtime import api
from grain_core.runtime.processes import ProcessRuntime
from grain_core.state import StateMismatchError

pytestmark = pytest.mark.timeout(180)

_DOC = pathlib.Path(__file__).parents[2] / "docs" / "writing-plugins.md"


def _doc_runtime_module() -> types.ModuleType:
    """Runs the first code block of "Write a runtime" (it checks itself) and returns its names."""
    text = _DOC.read_text()
    section = text[text.index("## Write a runtime") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    mod = types.ModuleType("doc_thread_runtime")
    exec(compile(code, str(_DOC), "exec"), mod.__dict__)
    return mod


DOC = _doc_runtime_module()
ThreadRuntime = DOC.ThreadRuntime


def _pipeline(n=23, batch=None):
    ds = grain.MapDataset.range(n).map(lambda x: x * 3).to_iter_dataset()
    ds = ds.filter(lambda x: x % 4 != 1)  # uneven shares: workers end at different times
    return ds


def _opts(k, buffer=2):
    return grain.MultiprocessingOptions(num_workers=k, per_worker_buffer_size=buffer)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_same_order_as_processes(k):
    ds = _pipeline()
    with iter(ds.mp_prefetch(_opts(k), runtime=ThreadRuntime())) as it:
        threads = list(it)
    with iter(ds.mp_prefetch(_opts(k))) as it:
        procs = list(it)
    assert threads == procs
    assert sorted(threads) == sorted(_pipeline())


def test_states_move_between_runtimes_at_every_position():
    ds = _pipeline()
    with iter(ds.mp_prefetch(_opts(2), runtime=ThreadRuntime())) as it:
        expected = list(it)
    with iter(ds.mp_prefetch(_opts(2), runtime=ThreadRuntime())) as it:
        states = [it.get_state()]
        for _ in expected:
            next(it)
            states.append(it.get_state())
        with pytest.raises(StopIteration):
            next(it)
    with iter(ds.mp_prefetch(_opts(2))) as procs, iter(
        ds.mp_prefetch(_opts(2), runtime=ThreadRuntime())
    ) as threads:
        for n in list(range(0, len(states), 3)) + [len(states) - 1]:
            for it in (procs, threads):
                it.set_state(states[n])
                assert list(it) == expected[n:], n
        # and back: a state taken by the process runtime restores into the thread runtime
        procs.set_state(states[0])
        for _ in range(5):
            next(procs)
        threads.set_state(procs.get_state())
        assert list(threads) == expected[5:]


def test_elastic_restore_across_worker_counts_and_runtimes():
    ds = grain.MapDataset.range(40).map(lambda x: x + 100).to_iter_dataset()
    with iter(ds.mp_prefetch(_opts(2), runtime=ThreadRuntime())) as it:
        head = [next(it) for _ in range(11)]
        state = it.get_state()
    for k, runtime in [(3, ThreadRuntime()), (3, None), (1, ThreadRuntime())]:
        with iter(ds.mp_prefetch(_opts(k), runtime=runtime)) as it:
            it.set_state(state)
            assert head + list(it) == list(range(100, 140))
    in_process = iter(ds)
    for _ in range(7):
        next(in_process)
    with iter(ds.mp_prefetch(_opts(3), runtime=ThreadRuntime())) as it:
        it.set_state(in_process.get_state())
        assert list(it) == list(range(107, 140))


def test_a_foreign_state_is_refused_and_changes_nothing():
    ds = _pipeline()
    other = grain.MapDataset.range(5).to_iter_dataset()
    with iter(other.mp_prefetch(_opts(2), runtime=ThreadRuntime())) as it:
        next(it)
        next(it)
        foreign = it.get_state()
    with iter(ds.mp_prefetch(_opts(2), runtime=ThreadRuntime())) as it:
        first = [next(it) for _ in range(3)]
        before = it.get_state()
        with pytest.raises(StateMismatchError):
            it.set_state(foreign)
        assert it.get_state() == before
        assert first + list(it) == list(_pipeline().mp_prefetch(_opts(2)))


def test_worker_exception_reaches_the_consumer_with_its_position():
    def boom(x):
        if x == 5:
            raise KeyError("five")
        return x

    ds = grain.MapDataset.range(10).map(boom).to_iter_dataset()
    with iter(ds.mp_prefetch(_opts(2), runtime=ThreadRuntime())) as it:
        got = []
        with pytest.raises(KeyError) as e:
            for x in it:
                got.append(x)
    assert got == [0, 1, 2, 3, 4]
    assert "output element #5" in "".join(getattr(e.value, "__notes__", []))


def test_runtime_registered_through_the_hook(fresh_plugins):
    mod = types.ModuleType("threads_runtime_plugin")
    mod.register_runtimes = hookimpl(lambda register: register(ThreadRuntime, name="threads"))
    plugins.register(mod)
    try:
        info = {p.name: p for p in plugins.list_plugins()}
        assert info["threads_runtime_plugin"].provides == ["threads"]
        ds = _pipeline().mp_prefetch(_opts(2), runtime="threads")
        assert isinstance(ds.runtime, ThreadRuntime)
        with iter(ds) as it:
            assert list(it) == list(_pipeline().mp_prefetch(_opts(2)))
        with pytest.raises(ValueError, match=r"no runtime named 'thread'.*'processes'.*'threads'"):
            _pipeline().mp_prefetch(_opts(2), runtime="thread")
    finally:
        plugins.unregister("threads_runtime_plugin")


def test_the_processes_name_is_the_kernels(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_DISABLE_AUTOLOAD, "1")
    mod = types.ModuleType("squatter")
    mod.register_runtimes = hookimpl(lambda register: register(ThreadRuntime, name="processes"))
    plugins.register(mod)
    try:
        with pytest.warns(RuntimeWarning, match="cannot register the runtime 'processes'"):
            plugins.load_plugins()
        assert "squatter" in {p.name for p in plugins.list_plugins() if p.status == "failed"}
        assert registry.lookup("runtimes", "processes", "test") is ProcessRuntime
        monkeypatch.setenv(plugins.ENV_STRICT, "1")
        plugins.reload_plugins()
        with pytest.raises(plugins.PluginError, match="cannot register the runtime 'processes'"):
            plugins.load_plugins()
    finally:
        plugins.unregister("squatter")


def test_processes_is_registered_through_the_register_runtimes_hook(fresh_plugins, monkeypatch):
    """The kernel's runtime comes from its built-in plugin's ``register_runtimes`` hook, like the
    Ray plugin's: no other path finds it. It loads with autoload off and is not a listed plugin."""
    from grain_core.runtime import builtin, multiprocess

    monkeypatch.setenv(plugins.ENV_DISABLE_AUTOLOAD, "1")
    plugins.reload_plugins()
    reg = registry.get_registry()
    provided = reg.provided[("runtimes", "processes")]
    assert provided.obj is ProcessRuntime and provided.plugin == builtin.PLUGIN_NAME
    assert reg.pm.get_plugin(builtin.PLUGIN_NAME) is builtin
    assert [impl.plugin for impl in reg.pm.hook.register_runtimes.get_hookimpls()] == [builtin]
    assert builtin.PLUGIN_NAME not in {p.name for p in plugins.list_plugins()}
    assert not hasattr(multiprocess, "_BUILT_IN")
    assert isinstance(multiprocess.resolve_runtime(None), ProcessRuntime)
    assert isinstance(multiprocess.resolve_runtime("processes"), ProcessRuntime)
    plugins.unregister(builtin.PLUGIN_NAME)  # built-in plugins are not unregistered
    plugins.reload_plugins()
    assert reg.lookup("runtimes", "processes", "test") is ProcessRuntime


def test_the_kernels_runtime_needs_no_discovery_of_installed_plugins(fresh_plugins, monkeypatch):
    """``mp_prefetch``'s default runtime is found among the built-in plugins alone: a broken
    plugin (here one that would take "processes", fatal in strict mode) does not stop it, while
    the discovery that ``list_plugins`` runs reports it."""
    from grain_core.runtime import multiprocess

    monkeypatch.setenv(plugins.ENV_DISABLE_AUTOLOAD, "1")  # only the plugin registered here
    monkeypatch.setenv(plugins.ENV_STRICT, "1")
    mod = types.ModuleType("strict_squatter")
    mod.register_runtimes = hookimpl(lambda register: register(ThreadRuntime, name="processes"))
    plugins.register(mod)
    try:
        assert isinstance(multiprocess.resolve_runtime(None), ProcessRuntime)
        assert isinstance(multiprocess.resolve_runtime("processes"), ProcessRuntime)
        with pytest.raises(plugins.PluginError, match="cannot register the runtime 'processes'"):
            plugins.list_plugins()
    finally:
        plugins.unregister("strict_squatter")


def test_runtime_argument_is_checked_early():
    with pytest.raises(TypeError, match="start_workers"):
        _pipeline().mp_prefetch(_opts(2), runtime=object())


def test_messages_are_dataclasses_and_the_job_pickles():
    import dataclasses
    import pickle

    for cls in (api.Start, api.Idle, api.Consumed, api.Stop, api.Template, api.Elements, api.End,
                api.Failure, api.Stats, api.WorkerJob, api.WorkerEnvironment):
        assert dataclasses.is_dataclass(cls), cls
    job = api.WorkerJob.create(_pipeline(), _opts(2))
    assert pickle.loads(pickle.dumps(job)) == job
    assert job.environment.sys_path == tuple(__import__("sys").path)


@pytest.mark.parametrize(
    "field,value",
    [("skip", "3"), ("skip", 3.5), ("skip", True), ("skip", 10**12), ("skip", -1),
     ("exhausted", "no"), ("next_worker", "1"), ("next_worker", 2), ("position", 1.5)],
)
def test_malformed_mp_states_are_refused_before_anything_changes(field, value):
    ds = _pipeline()
    with iter(ds.mp_prefetch(_opts(2))) as it:
        head = [next(it) for _ in range(3)]
        good = it.get_state()
        bad = json_copy(good)
        if field in ("skip", "exhausted"):
            bad["workers"][0][field] = value
        else:
            bad[field] = value
        with pytest.raises(StateMismatchError):
            it.set_state(bad)
        assert it.get_state() == good
        assert head + list(it) == list(_pipeline().mp_prefetch(_opts(2)))


def json_copy(x):
    import json

    return json.loads(json.dumps(x))
