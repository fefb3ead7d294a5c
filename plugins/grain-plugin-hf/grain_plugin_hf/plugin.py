"""Hook implementations registering the Hugging Face sources."""

from grain_core.author import hookimpl
from grain_plugin_hf.iterable import HuggingFaceIterDataset
from grain_plugin_hf.source import HuggingFaceDataSource


@hookimpl
def register_sources(register):
    register(HuggingFaceDataSource)  # grain_core.sources.HuggingFaceDataSource
    register(HuggingFaceIterDataset, experimental=True)  # grain_core.experimental.HuggingFaceIterDataset
