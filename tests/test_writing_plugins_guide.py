"""The "Writing a stage" guide in docs/writing-plugins.md works as written (issue 13).

Its Python blocks build a new iterator stage and a map stage with only documented names: each runs
in a fresh interpreter (as a reader would run it) and must succeed, the iterator stage passing the
conformance kit's stage checks; and the code uses no private grain_core name.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_plugin_public_api import kernel_private_names, violations

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "writing-plugins.md"


def _stage_blocks() -> list[str]:
    text = GUIDE.read_text()
    section = text.split("## Writing a stage", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_guide_has_an_iterator_stage_and_a_map_stage():
    blocks = _stage_blocks()
    assert len(blocks) == 2
    assert "OneParentIterator" in blocks[0] and "testing.check_stage(make)" in blocks[0]
    assert "OneParentMapDataset" in blocks[1] and "def element_at" in blocks[1]


def test_the_guide_uses_only_public_names():
    private = kernel_private_names()
    for code in _stage_blocks():
        assert list(violations(code, private)) == []


def test_the_guide_runs(tmp_path):
    outputs = []
    for code in _stage_blocks():
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert "RandomDropIterDataset: seed 8 vs 7" in outputs[0]
    assert "RandomDropIterDataset conforms" in outputs[0]
