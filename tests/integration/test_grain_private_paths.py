"""MaxText's TFRecord code shapes (subclasses of Grain's private ``_TFRecordReader`` and
``_TFRecordDatasetIterator``, a ``TFRecordIterDataset`` subclass reading ``self._path``) run
unchanged through the ``import grain`` alias on locally written TFRecord files, with google grain
0.2.18's recorded output; and with every plugin installed, every name of the private-path table
resolves (``grain_core/compat/private_paths.py``)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from grain_core.compat import private_paths

COMPAT = pathlib.Path(__file__).parents[1] / "compat"
RECORDED = json.loads((COMPAT / "data" / "grain_0_2_18_private_paths.json").read_text())


def test_every_name_of_the_table_resolves_with_every_plugin():
    for path, entry in private_paths.PRIVATE_PATHS.items():
        for name in entry:
            assert private_paths.resolve(path, name) is not None, (path, name)


def test_maxtext_tfrecord_subclasses_give_grains_output(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GRAIN_CORE_AS_GRAIN"}
    script = COMPAT / "private_path_scripts" / "maxtext_tfrecord.py"
    proc = subprocess.run(
        [sys.executable, "-m", "grain_core.compat", "run", str(script), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want = RECORDED["scripts"]["maxtext_tfrecord"]
    assert set(got) == set(want)
    for key in want:
        assert got[key] == want[key], key
