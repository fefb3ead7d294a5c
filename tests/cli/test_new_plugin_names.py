"""``grain-core new-plugin NAME`` validates NAME before writing anything and says what is allowed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grain_core.cli.new_plugin import MAX_NAME_LENGTH, check_name


def _new_plugin(name, where):
    return subprocess.run(
        [sys.executable, "-m", "grain_core", "new-plugin", name, "--dir", str(where)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "name",
    [
        "x" * 300,  # longer than a file name may be
        "a" * (MAX_NAME_LENGTH + 1),
        "../escape",
        "sub/dir",
        "back\\slash",
        "/abs",
        "9starts-with-digit",
        "double--dash",
        "trailing-",
        "sp ace",
        "dot.ted",
        "ünïcode",
        "",
        "grain-plugin-",
    ],
)
def test_refused_names_exit_2_with_what_is_allowed_and_write_nothing(tmp_path, name):
    proc = _new_plugin(name, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("grain-core new-plugin: error: plugin name")
    assert "lowercase ASCII letters and digits" in proc.stderr
    assert f"1 to {MAX_NAME_LENGTH} characters" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name, expected",
    [
        ("my-source", "my-source"),
        ("grain-plugin-my_source", "my_source"),
        ("MySource", "mysource"),
        ("a" * MAX_NAME_LENGTH, "a" * MAX_NAME_LENGTH),
    ],
)
def test_accepted_names_are_normalised(name, expected):
    assert check_name(name) == expected


def test_longest_name_writes_the_skeleton(tmp_path):
    proc = _new_plugin("a" * MAX_NAME_LENGTH, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == [f"grain-plugin-{'a' * MAX_NAME_LENGTH}"]


def test_dir_that_is_a_file_is_refused_without_traceback(tmp_path):
    target = tmp_path / "afile"
    target.write_text("")
    proc = _new_plugin("ok", target)
    assert proc.returncode == 2 and "is not a directory" in proc.stderr and "Traceback" not in proc.stderr
