"""mp_prefetch from interactive sessions: code typed at a prompt or in a notebook cell lives in a
``__main__`` without a file, and its functions and classes must still reach the workers."""

import subprocess
import sys
import textwrap

CELL = textwrap.dedent(
    """
    import grain_core as grain

    class AddOffset(grain.transforms.Map):
        def __init__(self, k):
            self.k = k

        def map(self, x):
            return x + self.k

    def square(x):
        return x * x

    ds = (
        grain.MapDataset.range(20)
        .map(square)
        .map(AddOffset(1))
        .to_iter_dataset()
        .map(lambda x: -x)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    with iter(ds) as it:
        print("RESULT", list(it))
    """
)
EXPECTED = "RESULT " + str([-(x * x + 1) for x in range(20)])


def test_from_stdin_like_a_prompt():
    out = subprocess.run(
        [sys.executable, "-"], input=CELL, capture_output=True, text=True, timeout=120
    )
    assert EXPECTED in out.stdout, out.stderr


def test_from_an_ipython_cell_like_a_notebook():
    driver = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        f"result = shell.run_cell({CELL!r})\n"
        "result.raise_error()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", driver], capture_output=True, text=True, timeout=120
    )
    assert EXPECTED in out.stdout, out.stdout + out.stderr


def test_enable_profiling_reports_each_worker():
    code = textwrap.dedent(
        """
        import grain_core as grain
        ds = grain.MapDataset.range(50).to_iter_dataset().mp_prefetch(
            grain.MultiprocessingOptions(num_workers=2, enable_profiling=True)
        )
        with iter(ds) as it:
            assert len(list(it)) == 50
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "worker 0/2: 25 elements" in out.stderr and "worker 1/2: 25 elements" in out.stderr, out.stderr
