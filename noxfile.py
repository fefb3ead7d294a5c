"""Sessions: ``tests`` (kernel), one ``plugin-<name>`` per folder under ``plugins/``, ``integration``
(everything installed together), ``example-plugin``, ``lint``, ``demo``, ``bench``, ``train-e2e``,
``docs``.

Each plugin session installs the kernel and only that plugin with its own declared extras, so a
plugin that forgot to declare a dependency fails its session.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PLUGINS = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())
TEST_PLUGINS = sorted(
    str(p) for p in (ROOT / "tests" / "plugins").iterdir() if (p / "pyproject.toml").exists()
)
EXAMPLE_PLUGIN = ROOT / "examples" / "grain-plugin-example"

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "lint",
    "tests",
    *(f"plugin-{p.removeprefix('grain-plugin-')}" for p in PLUGINS),
    "example-plugin",
    "integration",
    "docs",
]

PYTEST = ["pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]


def _install_kernel(session: nox.Session, extras: str = "test") -> None:
    session.install("-e", f"{ROOT}[{extras}]")


@nox.session
def tests(session: nox.Session) -> None:
    """The kernel's tests, with the range plugin and the test-only plugins installed."""
    _install_kernel(session, "test,jax,orbax")
    session.install("-e", str(ROOT / "plugins" / "grain-plugin-range"), *sum((["-e", p] for p in TEST_PLUGINS), []))
    session.run(*PYTEST, "tests", "--ignore=tests/integration", *session.posargs)


def _plugin_session(plugin: str):
    def run(session: nox.Session) -> None:
        _install_kernel(session)
        path = ROOT / "plugins" / plugin
        session.install("-e", f"{path}[test]")
        session.run(*PYTEST, str(path / "tests"), *session.posargs)

    run.__doc__ = f"Tests of {plugin}, installed alone with the kernel."
    return run


for _plugin in PLUGINS:
    nox.session(name=f"plugin-{_plugin.removeprefix('grain-plugin-')}")(_plugin_session(_plugin))


def _install_everything(session: nox.Session) -> None:
    _install_kernel(session, "test,jax,orbax")
    args = []
    for p in PLUGINS:
        args += ["-e", f"{ROOT / 'plugins' / p}[test]"]
    if EXAMPLE_PLUGIN.exists():
        args += ["-e", f"{EXAMPLE_PLUGIN}[test]"]
    session.install(*args)


@nox.session
def integration(session: nox.Session) -> None:
    """Everything installed together: seed examples, cross-plugin pipelines, property tests, examples."""
    _install_everything(session)
    session.run(*PYTEST, "tests/integration", *session.posargs)


@nox.session(name="example-plugin")
def example_plugin(session: nox.Session) -> None:
    """The example third-party plugin, installed from its folder with the kernel, runs its tests
    (which check that a plain ``import grain_core`` discovers it)."""
    _install_kernel(session)
    session.install(f"{EXAMPLE_PLUGIN}[test]")
    session.run(*PYTEST, str(EXAMPLE_PLUGIN / "tests"), *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff over the whole tree."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
def demo(session: nox.Session) -> None:
    """The demo pipeline on locally generated data."""
    _install_everything(session)
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Side-by-side benchmarks against google's grain from PyPI."""
    _install_everything(session)
    session.install("grain")
    session.run("python", "benchmarks/run.py", *session.posargs, env={"JAX_PLATFORMS": "cpu"})


@nox.session(name="train-e2e")
def train_e2e(session: nox.Session) -> None:
    """The end-to-end training-loop benchmark (benchmarks/train_e2e.py), small and on CPU."""
    _install_everything(session)
    session.run(
        "python", "benchmarks/train_e2e.py", "--small", *session.posargs, env={"JAX_PLATFORMS": "cpu"}
    )


@nox.session
def docs(session: nox.Session) -> None:
    """Builds the documentation site with warnings as errors."""
    _install_everything(session)
    session.install("-r", str(ROOT / "docs" / "requirements.txt"))
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html")


if os.environ.get("CI"):
    nox.options.error_on_missing_interpreters = True
