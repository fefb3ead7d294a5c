"""A Grain-style custom iterator reading ``self._ctx.mp_context`` in ``mp_prefetch`` workers.

Each element says which worker made it (``process_index``, ``process_count`` as the custom stage
sees them) in the main process, under ``mp_prefetch`` with two and three workers and under
``multithread_prefetch`` with three threads (each thread is one "process" of Grain's context).
Run with google grain (the recorder) or through ``python -m grain_core.compat run``; prints one
JSON object.
"""

import json

import grain

try:  # google grain's workers read absl flags (grain_core has none)
    from absl import flags

    flags.FLAGS.mark_as_parsed()
except ImportError:
    pass
from grain._src.python.dataset import dataset


class _TagIterator(dataset.DatasetIterator):
    def __init__(self, parent):
        super().__init__(parent)

    def __next__(self):
        value = next(self._parent)
        ctx = self._ctx.mp_context
        return [int(value), ctx.process_index, ctx.process_count]

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class Tag(dataset.IterDataset):
    def __init__(self, parent):
        super().__init__(parent)

    def __iter__(self):
        return _TagIterator(self._parent.__iter__())


def main() -> dict:
    out = {}
    tagged = Tag(grain.MapDataset.range(7).to_iter_dataset())
    out["main_process"] = list(tagged)
    for workers in (2, 3):
        it = iter(tagged.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)))
        out[f"workers_{workers}"] = sorted(list(it))
    threads = grain.experimental.multithread_prefetch(tagged, num_threads=3, buffer_size=2)
    out["threads_3"] = sorted(list(threads))
    return out


if __name__ == "__main__":
    print(json.dumps(main(), sort_keys=True))
