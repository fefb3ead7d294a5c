"""grain_core plugin providing ``HuggingFaceDataSource`` and ``HuggingFaceIterDataset``.

``datasets`` is imported only when one of them is built, so loading the plugin (at ``import
grain_core``) stays cheap.
"""

from grain_plugin_hf.iterable import HuggingFaceIterDataset, NotResumableError, resplit_states
from grain_plugin_hf.source import HuggingFaceDataSource
from grain_plugin_hf.workers import resplit_worker_state

__all__ = [
    "HuggingFaceDataSource",
    "HuggingFaceIterDataset",
    "NotResumableError",
    "resplit_states",
    "resplit_worker_state",
]
