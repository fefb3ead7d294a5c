"""``python -m grain_core.compat``: run ``import grain`` programs on grain_core.

Commands::

    python -m grain_core.compat run [--replace-installed] -m MODULE [ARGS...]
    python -m grain_core.compat run [--replace-installed] SCRIPT.py [ARGS...]
    python -m grain_core.compat install-pth [--site-dir DIR]   # honour GRAIN_CORE_AS_GRAIN=1
    python -m grain_core.compat uninstall-pth [--site-dir DIR]
    python -m grain_core.compat status
"""

from __future__ import annotations

import os
import runpy
import sys

from grain_core.compat import alias, pth

_USAGE = __doc__.split("Commands::", 1)[1]


def _run(args: list[str]) -> int:
    replace = False
    if args and args[0] == "--replace-installed":
        replace, args = True, args[1:]
    if not args:
        print(f"usage:{_USAGE}", file=sys.stderr)
        return 2
    try:
        alias.install_grain_alias(replace_installed=replace)
    except alias.GrainAliasError as e:
        print(f"grain_core.compat: {e}", file=sys.stderr)
        return 2
    # Child processes (spawned workers) get the alias too when the .pth file is installed.
    os.environ.setdefault(alias.ENV_VAR, "force" if replace else "1")
    if args[0] == "-m":
        if len(args) < 2:
            print("grain_core.compat run -m needs a module name.", file=sys.stderr)
            return 2
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")
    return 0


def _site_dir(args: list[str]) -> str | None:
    if len(args) == 2 and args[0] == "--site-dir":
        return args[1]
    if args:
        raise SystemExit(f"unexpected arguments {args}; usage:{_USAGE}")
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(f"usage:{_USAGE}")
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "run":
        return _run(rest)
    if cmd == "install-pth":
        print(
            f"wrote {pth.install_pth(_site_dir(rest))}; start Python with {alias.ENV_VAR}=1 to alias grain."
        )
        return 0
    if cmd == "uninstall-pth":
        removed = pth.uninstall_pth(_site_dir(rest))
        print("removed" if removed else "no .pth file was installed")
        return 0
    if cmd == "status":
        print(f"alias installed in this process: {alias.is_grain_alias_installed()}")
        print(f"google grain: {alias.google_grain_location() or 'not installed'}")
        path = pth.pth_path()
        print(f".pth file: {path if os.path.exists(path) else 'not installed'}")
        print(f"{alias.ENV_VAR}={os.environ.get(alias.ENV_VAR, '')!r}")
        return 0
    print(f"unknown command {cmd!r}; usage:{_USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
