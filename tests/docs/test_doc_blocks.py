"""Every Python block of README.md and docs/*.md runs as written (``nox -s docs``).

Convention (README "Layout and sessions"): a block fenced ```` ```python ```` (or ``py``) is run on
its own, as a script, in a fresh interpreter whose working directory is an empty temporary folder,
so it must import what it uses and make its own data. A block that must not run — a file of a
plugin package, a fragment of a larger program — is fenced ```` ```{code-block} python ````: MyST
highlights it the same way and this runner skips it deliberately. Pages added to docs/ later are
picked up without any change here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "py", "python3"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


class Block(NamedTuple):
    """One fenced code block: where it is, its info string and its (dedented) text."""

    page: Path
    line: int  # 1-based line of the opening fence
    info: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    """Every fenced block of a Markdown page, at any indentation (list items included)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence, info = len(m["indent"]), m["fence"], m["info"].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = _FENCE.match(lines[j])
            if (close and close["fence"][0] == fence[0] and len(close["fence"]) >= len(fence)
                    and not close["info"].strip()):
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        blocks.append(Block(page, i + 1, info, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def runnable_blocks() -> list[Block]:
    return [b for page in PAGES for b in fenced_blocks(page) if b.info.lower() in RUNNABLE]


BLOCKS = runnable_blocks()


def test_fence_parsing_and_the_no_run_marker(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```python\nprint(1)\n```\n"
        "- item\n\n  ```python\n  print(2)\n  ```\n"
        "````{code-block} python\nraise SystemExit(1)\n````\n"
        "~~~bash\nexit 1\n~~~\n"
    )
    blocks = fenced_blocks(page)
    assert [(b.line, b.info, b.code) for b in blocks] == [
        (2, "python", "print(1)\n"),
        (7, "python", "print(2)\n"),
        (10, "{code-block} python", "raise SystemExit(1)\n"),
        (13, "bash", "exit 1\n"),
    ]
    assert {b.info for b in blocks if b.info.lower() in RUNNABLE} == {"python"}


def test_the_readme_and_docs_have_blocks_to_run():
    pages = {b.page.name for b in BLOCKS}
    assert "README.md" in pages and "getting-started.md" in pages


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block_runs_as_written(block, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["JAX_PLATFORMS"] = "cpu"
    env["GRAIN_CORE_BLOCK_PLUGINS"] = "broken"  # a test-only plugin, when the kernel's are around
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600,  # a hang guard only
    )
    assert proc.returncode == 0, (
        f"{block.id} failed (exit {proc.returncode}):\n{block.code}\n"
        f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    )


def _checks(code: str) -> bool:
    """True when the block checks its result: an ``assert`` statement, or a call of a function
    whose name starts with ``assert`` (``np.testing.assert_array_equal``) or ``check_``
    (``grain_core.testing.check_source``), which raise when the result is wrong."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name.startswith(("assert", "check_")):
                return True
    return False


def test_the_checker_tells_checked_blocks_apart():
    assert _checks("x = 1\nassert x == 1\n")
    assert _checks("import numpy as np\nnp.testing.assert_array_equal([1], [1])\n")
    assert _checks("from grain_core import testing\ntesting.check_source([1])\n")
    assert not _checks("x = 1\nprint(x)  # 1\n")
    assert not _checks("def f():\n    pass\nf()\n")


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block_checks_its_result(block):
    """A runnable block shows its result *and* checks it (an assert, or a testing helper that
    raises), so a docs run fails when the documented behaviour changes, not only when it crashes."""
    assert _checks(block.code), (
        f"{block.id} runs but checks nothing: add an assert of what it shows (e.g. after a "
        f"print, `assert value == expected`).\n{block.code}"
    )
