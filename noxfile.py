"""Sessions: ``lint``, ``typecheck`` (mypy), ``tests`` (kernel), one ``plugin-<name>`` per folder
under ``plugins/``, ``example-plugin``, ``integration`` (everything installed together), ``docs``
(site build and every Python block of README.md and docs/), ``install`` (the README's checkout
install command in a fresh venv), ``build`` (sdists and wheels of every distribution, ``twine
check``, a fresh venv from the wheels), ``tests-spawn`` (a chosen part of the runtime and
DataLoader tests with workers started by ``spawn``, a few minutes); on demand: ``tests-spawn-full``
(all of tests/runtime and tests/dataloader under spawn, about 18 minutes on a loaded 2-core
machine), ``demo``, ``bench``, ``train-e2e``, ``soak``.

Each plugin session installs the kernel, the range plugin (the tests' input source), the
first-party plugins it declares, and that plugin with its own declared extras, so a plugin that
forgot to declare a dependency fails its session.

Virtual environments are reused (``nox.options.reuse_venv = "yes"``), and :func:`_install` skips
installing when a stamp in the venv says the same packages were installed from the same
``pyproject.toml`` / requirements files: the kernel and plugins are installed editable, so code
changes need no reinstall, and any change to their metadata installs again. ``nox --no-reuse-venv``
(or deleting ``.nox/``) starts from scratch. ``install`` and ``build`` always use fresh venvs of
their own: testing a fresh install is their point.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PLUGINS = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())
TEST_PLUGINS = sorted(
    str(p) for p in (ROOT / "tests" / "plugins").iterdir() if (p / "pyproject.toml").exists()
)
EXAMPLE_PLUGIN = ROOT / "examples" / "grain-plugin-example"
CHECKOUT_REQUIREMENTS = ROOT / "requirements-checkout.txt"

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
nox.options.sessions = [
    "lint",
    "typecheck",
    "tests",
    "tests-spawn",
    *(f"plugin-{p.removeprefix('grain-plugin-')}" for p in PLUGINS),
    "example-plugin",
    "integration",
    "docs",
    "install",
    "build",
]

PYTEST = ["pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]


# --- installing ------------------------------------------------------------------------------------


def _metadata_digest(args: tuple[str, ...]) -> str:
    """What an install depends on: its arguments and every pyproject / requirements file."""
    h = hashlib.sha256("\0".join(args).encode())
    files = [ROOT / "pyproject.toml", CHECKOUT_REQUIREMENTS, ROOT / "docs" / "requirements.txt"]
    files += sorted(ROOT.glob("plugins/*/pyproject.toml"))
    files += sorted(ROOT.glob("tests/plugins/*/pyproject.toml"))
    files += sorted(ROOT.glob("examples/*/pyproject.toml"))
    for f in files:
        if f.exists():
            h.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _install(session: nox.Session, *args: str) -> None:
    """``session.install(*args)``, skipped when this venv already holds exactly that install."""
    location = getattr(session.virtualenv, "location", None)
    if not location:  # no venv of its own (python=False): nothing to remember
        session.install(*args)
        return
    stamps = Path(location) / "grain-core-installed"
    stamps.mkdir(exist_ok=True)
    stamp = stamps / hashlib.sha256("\0".join(args).encode()).hexdigest()[:16]
    digest = _metadata_digest(args)
    if stamp.exists() and stamp.read_text() == digest:
        session.log(f"install skipped (unchanged since the last run): {' '.join(args)}")
        return
    session.install(*args)
    stamp.write_text(digest)


def _install_kernel(session: nox.Session, extras: str = "test") -> None:
    _install(session, "-e", f"{ROOT}[{extras}]")


def _install_everything(session: nox.Session) -> None:
    args = ["-e", f"{ROOT}[test,jax,orbax,viz]"]
    for p in PLUGINS:
        args += ["-e", f"{ROOT / 'plugins' / p}[test]"]
    if EXAMPLE_PLUGIN.exists():
        args += ["-e", f"{EXAMPLE_PLUGIN}[test]"]
    _install(session, *args)


def _bin(venv: Path, name: str) -> str:
    return str(venv / ("Scripts" if sys.platform == "win32" else "bin") / name)


# --- sessions ----------------------------------------------------------------------------------------


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff over the whole tree."""
    _install(session, "ruff")
    session.run("ruff", "check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """The kernel's tests, with the range plugin and the test-only plugins installed."""
    args = ["-e", f"{ROOT}[test,jax,orbax]", "-e", str(ROOT / "plugins" / "grain-plugin-range")]
    for p in TEST_PLUGINS:
        args += ["-e", p]
    _install(session, *args)
    session.run(
        *PYTEST, "tests", "--ignore=tests/integration", "--ignore=tests/docs", *session.posargs
    )


#: The spawn session's part of the suite (pytest fails on a node id that does not exist):
#: start-method selection, mp_prefetch order / restore / fresh-process restore, worker errors and
#: deaths, close and garbage collection, the worker environment and per-worker buffer, orphan
#: cleanup and the shared-memory -> pipes fallback, real interrupts, the concurrency contract, and
#: the DataLoader with workers (restore, filter + batch, runtimes).
SPAWN_TESTS = [
    "tests/runtime/test_start_method.py",
    *(
        f"tests/runtime/test_multiprocess.py::test_{name}"
        for name in [
            "seed_002_example_order_matches_in_process",
            "arrays_arrive_intact_and_writable",
            "order_independent_of_timing_and_uneven_exhaustion",
            "restore_at_many_points",
            "restore_in_fresh_process",
            "state_from_other_worker_count_is_refused_where_not_elastic",
            "state_from_other_worker_count_restores_elastically",
            "worker_exception_reraised_with_traceback_and_position",
            "unpicklable_worker_exception_becomes_worker_error",
            "worker_sigkill_is_reported_at_its_next_turn",
            "abandoned_iterator_is_collected",
            "close_during_blocked_read",
            "interpreter_exit_ends_workers",
            "lambdas_closures_and_local_classes",
            "worker_init_fn_runs_first_in_each_worker",
            "plugins_visible_in_workers",
        ]
    ),
    "tests/runtime/test_orphans.py",
    "tests/runtime/test_credit_channel.py",
    "tests/runtime/test_worker_environment.py::"
    "test_a_script_never_imports_from_the_working_directory[spawn]",
    "tests/runtime/test_worker_environment.py::"
    "test_per_worker_buffer_size_bounds_elements_produced_ahead[2-1]",
    "tests/runtime/test_shm_pool.py::"
    "test_many_messages_use_a_bounded_pool_and_restores_stay_correct",
    "tests/runtime/test_interrupts.py::test_mp_prefetch_survives_real_interrupts[1]",
    "tests/runtime/test_interrupts.py::test_dataloader_survives_real_interrupts",
    "tests/runtime/test_interrupts.py::test_mp_prefetch_with_interrupts_at_the_blocking_point",
    "tests/runtime/test_interrupts.py::test_dataloader_with_interrupts_at_the_blocking_point",
    "tests/runtime/test_concurrent_use.py::"
    "test_a_second_thread_gets_a_clear_error_never_a_hang[mp_prefetch-next]",
    "tests/runtime/test_concurrent_use.py::"
    "test_a_second_thread_gets_a_clear_error_never_a_hang[dataloader_workers-next]",
    "tests/dataloader/test_dataloader_runtime.py",
    "tests/dataloader/test_dataloader_loader.py::test_workers_cover_and_restore_exactly",
    "tests/dataloader/test_dataloader_loader.py::test_workers_with_filter_batch_per_worker_restore",
    "tests/dataloader/test_dataloader_loader.py::test_workers_context_manager",
]


def _spawn_session(session: nox.Session, paths: list[str]) -> None:
    args = ["-e", f"{ROOT}[test,jax,orbax]", "-e", str(ROOT / "plugins" / "grain-plugin-range")]
    for p in TEST_PLUGINS:
        args += ["-e", p]
    _install(session, *args)
    session.run(*PYTEST, *(session.posargs or paths), env={"GRAIN_CORE_MP_START_METHOD": "spawn"})


@nox.session(name="tests-spawn")
def tests_spawn(session: nox.Session) -> None:
    """Workers started by ``spawn`` (as on macOS and Windows), ``GRAIN_CORE_MP_START_METHOD=spawn``,
    over :data:`SPAWN_TESTS`: a part of tests/runtime and tests/dataloader chosen to run in a few
    minutes on a 2-core machine (spawned workers import everything again). Positional arguments
    replace the list: ``nox -s tests-spawn -- tests/runtime/test_elastic.py``."""
    _spawn_session(session, SPAWN_TESTS)


@nox.session(name="tests-spawn-full")
def tests_spawn_full(session: nox.Session) -> None:
    """All of tests/runtime and tests/dataloader with spawned workers; on demand (about 18 minutes
    on a loaded 2-core machine, too long for the default run)."""
    _spawn_session(session, ["tests/runtime", "tests/dataloader"])


def _first_party_requirements(plugin: str) -> list[str]:
    """The ``grain-plugin-*`` distributions of this checkout that ``plugin`` depends on (they are
    not on the package index yet, so they are installed from their folders)."""
    import tomllib

    meta = tomllib.loads((ROOT / "plugins" / plugin / "pyproject.toml").read_text())["project"]
    names = [*meta.get("dependencies", []), *meta.get("optional-dependencies", {}).get("test", [])]
    found = []
    for requirement in names:
        name = requirement.split(";")[0].split("[")[0]
        for op in "<>=!~ ":
            name = name.split(op)[0]
        if name in PLUGINS and name != plugin:
            found.append(name)
    return found


def _plugin_session(plugin: str):
    def run(session: nox.Session) -> None:
        path = ROOT / "plugins" / plugin
        # The range plugin is every plugin test's input source (MapDataset.range).
        extra = sorted({"grain-plugin-range", *_first_party_requirements(plugin)} - {plugin})
        args = sum((["-e", str(ROOT / "plugins" / name)] for name in extra), [])
        _install(session, "-e", f"{ROOT}[test]", *args, "-e", f"{path}[test]")
        session.run(*PYTEST, str(path / "tests"), *session.posargs)

    run.__doc__ = f"Tests of {plugin}, installed alone with the kernel."
    return run


for _plugin in PLUGINS:
    nox.session(name=f"plugin-{_plugin.removeprefix('grain-plugin-')}")(_plugin_session(_plugin))


@nox.session(name="example-plugin")
def example_plugin(session: nox.Session) -> None:
    """The example third-party plugin, installed from its folder with the kernel, runs its tests
    (which check that a plain ``import grain_core`` discovers it)."""
    _install(session, "-e", f"{ROOT}[test]", f"{EXAMPLE_PLUGIN}[test]")
    session.run(*PYTEST, str(EXAMPLE_PLUGIN / "tests"), *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    """Everything installed together: seed examples, cross-plugin pipelines, property tests, examples."""
    _install_everything(session)
    session.run(*PYTEST, "tests/integration", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Runs every Python block of README.md and docs/*.md (tests/docs), then builds the site with
    warnings as errors."""
    _install_everything(session)
    _install(session, "-r", str(ROOT / "docs" / "requirements.txt"))
    session.run(*PYTEST, "tests/docs", *session.posargs)
    session.run("sphinx-build", "-W", "--keep-going", "-q", "-b", "html", "docs", "docs/_build/html")


@nox.session(venv_backend="none")
def install(session: nox.Session) -> None:
    """The README's install command from a checkout, in a fresh ``python -m venv`` with pip, then a
    smoke test (``--version``, the plugin listing, a small pipeline) run outside the checkout."""
    venv = Path(session.create_tmp()).resolve() / "fresh-venv"
    session.run(sys.executable, "-m", "venv", "--clear", str(venv), external=True)
    python = _bin(venv, "python")
    session.run(python, "-m", "pip", "install", "-q", "-r", str(CHECKOUT_REQUIREMENTS), external=True)
    _smoke(session, python, venv.parent, from_wheels=False)


@nox.session
def build(session: nox.Session) -> None:
    """Sdists and wheels of the kernel and every plugin (``uv build``: each wheel is built from its
    sdist), ``twine check``, then ``grain-core-kernel[all]`` installed from those wheels alone into a
    fresh venv and a smoke test there."""
    _install(session, "uv", "twine")
    tmp = Path(session.create_tmp()).resolve()
    dist = tmp / "dist"
    if dist.exists():
        for f in dist.iterdir():
            f.unlink()
    for project in [ROOT, *(ROOT / "plugins" / p for p in PLUGINS)]:
        session.run("uv", "build", "-q", "--out-dir", str(dist), str(project))
    artifacts = sorted(str(f) for f in [*dist.glob("*.whl"), *dist.glob("*.tar.gz")])
    session.run("twine", "check", "--strict", *artifacts)
    wheels = sorted(dist.glob("*.whl"))
    kernel = [w for w in wheels if w.name.startswith("grain_core_kernel-")]
    plugins = [str(w) for w in wheels if w not in kernel]
    if len(kernel) != 1 or len(plugins) != len(PLUGINS):
        session.error(f"expected 1 kernel wheel and {len(PLUGINS)} plugin wheels, got {wheels}")
    venv = tmp / "wheel-venv"
    session.run("uv", "venv", "-q", "--clear", "-p", sys.executable, str(venv))
    python = _bin(venv, "python")
    # [all] names every plugin distribution: here they resolve to the wheels just built.
    session.run("uv", "pip", "install", "-q", "-p", python, f"{kernel[0]}[all]", *plugins)
    _smoke(session, python, tmp, from_wheels=True)


SMOKE = """
import json, subprocess, sys
import numpy as np
import grain_core as grain

expected = set(DISTS)
out = subprocess.run([sys.executable, "-m", "grain_core", "plugins", "--json"], check=True,
                     capture_output=True, text=True).stdout
loaded = {p["distribution"] for p in json.loads(out) if p["status"] == "loaded"}
assert expected <= loaded, sorted(expected - loaded)
print(subprocess.run([sys.executable, "-m", "grain_core", "--version"], check=True,
                     capture_output=True, text=True).stdout.strip())
if FROM_WHEELS:
    assert grain.__file__.startswith(sys.prefix), grain.__file__ + " is not the installed one"
ds = (grain.MapDataset.range(100).seed(1).shuffle().map(lambda x: x * 2).batch(10)
      .to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
with iter(ds) as it:
    first = next(it)
    state = it.get_state()
    second = next(it)
    it.set_state(state)
    np.testing.assert_array_equal(next(it), second)
assert sorted(np.concatenate(list(ds)).tolist()) == list(range(0, 200, 2))
print("smoke test passed:", sorted(loaded))
"""


def _smoke(session: nox.Session, python: str, cwd: Path, from_wheels: bool) -> None:
    script = cwd / "smoke.py"
    script.write_text(
        SMOKE.replace("DISTS", repr(PLUGINS)).replace("FROM_WHEELS", repr(from_wheels))
    )
    with session.chdir(cwd):  # not the checkout: imports come from the venv
        session.run(python, str(script), env={"JAX_PLATFORMS": "cpu"}, external=True)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy (pinned) over the kernel, grain_core/; settings in mypy.ini."""
    _install(session, "-e", str(ROOT), "mypy==2.4.1")
    session.run("mypy", *session.posargs)


@nox.session
def demo(session: nox.Session) -> None:
    """The demo pipeline on locally generated data."""
    _install_everything(session)
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Side-by-side benchmarks against google's grain from PyPI."""
    _install_everything(session)
    _install(session, "grain", "pillow")
    session.run("python", "benchmarks/run.py", *session.posargs, env={"JAX_PLATFORMS": "cpu"})


@nox.session
def soak(session: nox.Session) -> None:
    """The chaos soak (benchmarks/soak.py; not in the default run): 10**6 elements through
    mp_prefetch and interleave under worker kills, Ctrl-C and restores into fresh processes with
    other worker counts, checked exactly-once; then open/iterate/close cycles leaving nothing.
    Bounded: ``nox -s soak -- --minutes 10`` (default 10, at most 120)."""
    _install_everything(session)
    session.run("python", "benchmarks/soak.py", *session.posargs, env={"JAX_PLATFORMS": "cpu"})


@nox.session(name="train-e2e")
def train_e2e(session: nox.Session) -> None:
    """The end-to-end training-loop benchmark (benchmarks/train_e2e.py), small and on CPU."""
    _install_everything(session)
    _install(session, "pillow")
    session.run(
        "python", "benchmarks/train_e2e.py", "--small", *session.posargs, env={"JAX_PLATFORMS": "cpu"}
    )


if os.environ.get("CI"):
    nox.options.error_on_missing_interpreters = True
