"""The README's example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})


def test_readme_starts_with_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    lines = [line for line in first_block.splitlines() if line.strip()]
    assert len(lines) == 2
    assert lines[0].startswith("python -m pip install nox uv && python -m nox -s demo")
    assert lines[1].startswith("python -m pip install nox uv && python -m nox ")
    ci = (README.parent / ".ci" / "run").read_text()
    assert lines[1].split("#")[0].strip() in ci
