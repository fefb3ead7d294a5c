"""The distribution metadata stays consistent as plugins come and go: the kernel is
``grain-core-kernel``, every first-party plugin depends on it, has an extra of its own, is in
``[all]`` and in the checkout install command (``requirements-checkout.txt``)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIRS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())


def _project(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0] for r in requirements}


def test_kernel_distribution_and_extras():
    kernel = _project(ROOT)
    assert kernel["name"] == "grain-core-kernel"
    extras = kernel["optional-dependencies"]
    for d in PLUGIN_DIRS:
        short = d.name.removeprefix("grain-plugin-")
        assert extras[short] == [f"{d.name}>=0.1"], short
    expanded = set()
    for req in extras["all"]:
        name, _, rest = req.partition("[")
        assert name == "grain-core-kernel"
        expanded |= set(rest.rstrip("]").split(","))
    assert {"jax", "orbax"} <= expanded
    assert {d.name.removeprefix("grain-plugin-") for d in PLUGIN_DIRS} <= expanded
    assert {"test", "viz"} <= set(extras)


def test_every_plugin_depends_on_the_kernel_distribution():
    dirs = [*PLUGIN_DIRS, *sorted((ROOT / "tests" / "plugins").iterdir()),
            ROOT / "examples" / "grain-plugin-example"]
    for d in dirs:
        if not (d / "pyproject.toml").exists():
            continue
        deps = _project(d)["dependencies"]
        assert "grain-core-kernel>=0.1" in deps, d.name
        assert "grain-core" not in _names(deps), d.name  # an unrelated project on the index


def test_checkout_requirements_install_everything():
    lines = [
        line.strip() for line in (ROOT / "requirements-checkout.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "-e .[all,test]"
    assert sorted(lines[1:]) == sorted(f"-e ./plugins/{d.name}[test]" for d in PLUGIN_DIRS)

