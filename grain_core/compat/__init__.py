"""Running unmodified ``import grain`` code on grain_core (opt-in).

Three ways, all opt-in and all refusing to hide a really installed google ``grain`` unless asked:

* in Python: ``grain_core.compat.install_grain_alias()`` before the first ``import grain``;
* a launcher, for programs you cannot edit: ``python -m grain_core.compat run -m maxtext.train ...``
  (or ``run script.py args``) runs the program with the alias installed;
* an environment switch: ``python -m grain_core.compat install-pth`` writes a ``.pth`` file into
  site-packages once; from then on, any Python of that environment started with
  ``GRAIN_CORE_AS_GRAIN=1`` has the alias (``GRAIN_CORE_AS_GRAIN=force`` also replaces an installed
  google grain). Without the variable the ``.pth`` line does nothing and imports nothing.

With the alias, ``import grain``, ``import grain.python as grain``, ``from grain.experimental
import ElasticIterator`` and every other ``grain.X`` module resolve to ``grain_core`` / ``grain_core.X``
(the same module objects). Grain's private paths that public projects import (``from
grain._src.python.dataset.sources.tfrecord_dataset import _TFRecordReader``, ...) resolve through one
table, :mod:`grain_core.compat.private_paths`. See docs/migration.md.
"""

from __future__ import annotations

from grain_core.compat.alias import (
    ENV_VAR,
    GrainAliasError,
    install_from_env,
    install_grain_alias,
    is_grain_alias_installed,
    uninstall_grain_alias,
)

__all__ = [
    "ENV_VAR",
    "GrainAliasError",
    "install_from_env",
    "install_grain_alias",
    "is_grain_alias_installed",
    "uninstall_grain_alias",
]
