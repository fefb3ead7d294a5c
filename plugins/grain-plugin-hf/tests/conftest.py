"""Offline by construction: the Hugging Face hub is disabled and every ``datasets`` cache lives in a
temporary directory, set before ``datasets`` is imported; the tests build their datasets locally
(``Dataset.from_dict`` and ``load_dataset`` of local Parquet / JSON / CSV files)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="grain-hf-tests-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = os.path.join(_CACHE, "home")
os.environ["HF_DATASETS_CACHE"] = os.path.join(_CACHE, "datasets")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

import pytest  # noqa: E402

import grain_core  # noqa: E402
from grain_core import plugins  # noqa: E402

try:
    grain_core.sources.HuggingFaceDataSource  # noqa: B018  (installed: found by its entry point)
except AttributeError:  # running from the folder without installing: register by hand
    from grain_plugin_hf import plugin

    plugins.register(plugin)


@pytest.fixture
def hf_cache(tmp_path):
    """A cache dir for load_dataset inside the test's tmp_path."""
    return str(tmp_path / "hf-cache")
