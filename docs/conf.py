"""Sphinx configuration of the grain_core documentation (``nox -s docs``). No network is used."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "grain_core"
author = "grain_core authors"
copyright = "grain_core authors"  # noqa: A001
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "requirements.txt"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = [("Rules", "notes")]
# Optional heavy dependencies are not needed to build the docs.
autodoc_mock_imports = ["jax", "jaxlib", "orbax", "array_record", "pyarrow", "tensorflow_datasets"]

html_theme = "alabaster"
html_title = "grain_core"
html_static_path: list[str] = []
