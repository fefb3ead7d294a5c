"""Imported once by the forkserver of the ``"processes"`` runtime: the consumer's ``sys.path``
applied (the forkserver starts with ``PYTHONSAFEPATH=1``, so the working directory was not on its
path), then heavy imports and plugin discovery done before any worker forks, so a worker starts in
milliseconds. An entry point: it imports the whole package, so it lives outside
``grain_core/runtime/`` (which ``grain_core`` itself imports). Workers re-run discovery
when their ``GRAIN_CORE_*`` environment differs from the one discovery ran with here."""

from __future__ import annotations

import warnings

from grain_core.runtime.process_worker import restore_environment

restore_environment()

import cloudpickle  # noqa: E402,F401
import numpy  # noqa: E402,F401

import grain_core  # noqa: E402,F401
from grain_core.compat import alias as _alias  # noqa: E402

_alias.install_from_env()  # GRAIN_CORE_AS_GRAIN (set by `python -m grain_core.compat run`): workers
# unpickle user modules that say `import grain` / `from grain._src... import ...`
# The DataLoader's worker pipeline (data_loader_stages, samplers): 12 ms of imports, numpy.random's
# among them, that each DataLoader worker made again while unpickling its pipeline.
import grain_core.data_loader_stages  # noqa: E402,F401
import grain_core.dataset.batch_ops  # noqa: E402,F401
import grain_core.dataset.filter_ops  # noqa: E402,F401
import grain_core.dataset.iter_ops  # noqa: E402,F401
import grain_core.dataset.map_ops  # noqa: E402,F401
import grain_core.samplers  # noqa: E402,F401
from grain_core.plugins.registry import get_registry  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        get_registry().ensure_loaded()
    except Exception:  # a worker reports plugin problems itself
        get_registry().reload()
