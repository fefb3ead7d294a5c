"""One home per fact: ``grain_core.plugins.registry.PROVIDERS`` is the only table of which built-in
plugin provides which name. The install hints derive from it, the tables in ``docs/plugins.md`` and
``README.md`` must be its rendering (:func:`render`), and every built-in plugin installed here must
register exactly what it lists (all of them: ``tests/integration/test_plugin_providers.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grain_core.plugins import registry

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "docs" / "plugins.md", ROOT / "README.md"]
HEADER = "| distribution | provides |\n| --- | --- |\n"


def render() -> str:
    """The Markdown table of :data:`registry.PROVIDERS`, as the docs must show it."""
    rows = "".join(
        f"| `{dist}` | {', '.join(f'`{q}`' for q in names)} |\n" for dist, names in registry.PROVIDERS.items()
    )
    return HEADER + rows


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_show_the_providers_table(doc):
    text = doc.read_text()
    start = text.find(HEADER)
    assert start >= 0, f"{doc} has no '| distribution | provides |' table"
    found = re.match(r"(?:\|[^\n]*\n)+", text[start:]).group(0)
    assert found == render(), (
        f"the providers table in {doc.name} differs from grain_core.plugins.registry.PROVIDERS; "
        f"replace it with:\n{render()}"
    )


def test_install_hints_derive_from_the_table():
    expected = {q.rpartition(".")[2]: d for d, names in registry.PROVIDERS.items() for q in names}
    assert registry.KNOWN_PROVIDERS == expected


# The built-in plugins installed here (the ``tests`` session: the range plugin). Every one of them
# is checked, in the ``integration`` session (all installed, none skipped), by
# tests/integration/test_plugin_providers.py.
INSTALLED = [d for d in sorted(registry.PROVIDERS) if registry.installed_version(d) is not None]


@pytest.mark.parametrize("dist", INSTALLED)
def test_installed_builtin_plugin_registers_what_the_table_lists(fresh_plugins, dist):
    provided = {
        key for key, item in fresh_plugins.provided.items() if registry.normalize(item.distribution) == dist
    }
    assert provided == {registry.registry_key(q) for q in registry.PROVIDERS[dist]}
