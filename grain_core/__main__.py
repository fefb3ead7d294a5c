"""``python -m grain_core``: the grain-core command line."""

from grain_core.cli import main

if __name__ == "__main__":
    main()
