"""The ``grain`` -> ``grain_core`` module alias: a meta-path finder (see :mod:`grain_core.compat`).

Contract:

* :func:`install_grain_alias` puts a finder first on ``sys.meta_path`` that answers ``grain`` and
  every ``grain.X.Y`` with the module ``grain_core.X.Y``: ``sys.modules["grain.X.Y"]`` *is*
  ``sys.modules["grain_core.X.Y"]``. A ``grain.X`` that grain_core lacks raises
  ``ModuleNotFoundError`` saying so. Grain's private paths that public code imports
  (``grain._src...``) resolve through the one table of :mod:`grain_core.compat.private_paths`;
  any other ``grain._src`` path raises that ``ModuleNotFoundError`` too.
* It refuses (``GrainAliasError``, nothing changed) when google grain is importable, unless
  ``replace_installed=True``; and when a module named ``grain`` that is not grain_core was already
  imported (an alias cannot replace it any more).
* Installing turns ``grain_core.config.grain_exact`` on (Grain 0.2.18's data, bugs included)
  unless the user set it (``update`` or ``GRAIN_CORE_GRAIN_EXACT``); uninstalling turns it back.
* Installing twice is a no-op; :func:`uninstall_grain_alias` removes the finder and the aliased
  ``grain*`` entries of ``sys.modules``.
* :func:`install_from_env` reads ``GRAIN_CORE_AS_GRAIN``: unset, empty or ``0`` does nothing; ``1``
  installs the alias unless google grain is installed (then it warns and leaves ``grain`` alone);
  ``force`` installs it in any case. Any other value warns and does nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import warnings
from types import ModuleType
from typing import Any

from grain_core.compat import private_paths

__all__ = [
    "ENV_VAR",
    "GrainAliasError",
    "install_from_env",
    "install_grain_alias",
    "is_grain_alias_installed",
    "uninstall_grain_alias",
]

ENV_VAR = "GRAIN_CORE_AS_GRAIN"
_ALIAS = "grain"
_TARGET = "grain_core"
_lock = threading.Lock()


class GrainAliasError(RuntimeError):
    """The ``grain`` alias cannot be installed (the message says why and what to do)."""


def _target_name(fullname: str) -> str | None:
    if fullname == _ALIAS:
        return _TARGET
    if fullname.startswith(_ALIAS + "."):
        return _TARGET + fullname[len(_ALIAS) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a placeholder, replaced by the real module in exec_module

    def exec_module(self, module: ModuleType) -> None:
        real = importlib.import_module(self.target)
        # The import system returns whatever sys.modules holds under the alias name afterwards.
        sys.modules[module.__name__] = real


class _PrivatePathLoader(importlib.abc.Loader):
    """Makes the module of a ``grain._src`` path from the table (``private_paths.make_module``)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return private_paths.make_module(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        pass


class GrainAliasFinder(importlib.abc.MetaPathFinder):
    """Resolves ``grain`` and ``grain.*`` to ``grain_core`` and ``grain_core.*``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        real = _target_name(fullname)
        if real is None:
            return None
        if private_paths.is_private_path(fullname) or private_paths.is_private_package(fullname):
            return importlib.util.spec_from_loader(
                fullname,
                _PrivatePathLoader(),
                is_package=private_paths.is_private_package(fullname),
            )
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: `grain` is an alias of grain_core here "
                f"(grain_core.compat), and grain_core has no module {real!r}. Of Grain's private "
                "modules (grain._src) only the paths public projects import are mapped "
                "(grain_core.compat.private_paths, docs/migration.md); use the public names.",
                name=fullname,
            )
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(real), is_package=found.submodule_search_locations is not None
        )


def _installed_finder() -> GrainAliasFinder | None:
    for f in sys.meta_path:
        if isinstance(f, GrainAliasFinder):
            return f
    return None


def is_grain_alias_installed() -> bool:
    """Whether ``import grain`` resolves to grain_core in this process."""
    return _installed_finder() is not None


def google_grain_location() -> str | None:
    """Where an installed google ``grain`` (or any other top-level ``grain``) lives, if anywhere."""
    spec = importlib.machinery.PathFinder.find_spec(_ALIAS)
    if spec is None:
        return None
    if spec.origin not in (None, "namespace"):
        return spec.origin
    locations = list(spec.submodule_search_locations or [])
    return locations[0] if locations else _ALIAS


def install_grain_alias(*, replace_installed: bool = False) -> None:
    """Makes ``import grain`` (and ``grain.*``) resolve to grain_core in this process.

    Raises ``GrainAliasError`` (changing nothing) when google grain is installed and
    ``replace_installed`` is false, or when a module named ``grain`` other than grain_core is
    already imported.
    """
    with _lock:
        if _installed_finder() is not None:
            return
        loaded = sys.modules.get(_ALIAS)
        if loaded is not None and getattr(loaded, "__name__", None) != _TARGET:
            raise GrainAliasError(
                f"A module named 'grain' is already imported ({getattr(loaded, '__file__', loaded)}); "
                "the alias must be installed before the first `import grain`. Call "
                "install_grain_alias() earlier, or use `python -m grain_core.compat run ...`."
            )
        where = google_grain_location()
        if where is not None and not replace_installed:
            raise GrainAliasError(
                f"google grain is installed ({where}); the alias would hide it. Pass "
                "replace_installed=True (or GRAIN_CORE_AS_GRAIN=force) to use grain_core anyway, "
                "or uninstall grain."
            )
        sys.meta_path.insert(0, GrainAliasFinder())
        # Code written for Grain gets Grain 0.2.18's data, bugs included (unless the user chose).
        from grain_core.global_config import config

        config.default_grain_exact(True)


def uninstall_grain_alias() -> None:
    """Removes the alias and the ``grain*`` modules it put in ``sys.modules``."""
    with _lock:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, GrainAliasFinder)]
        from grain_core.global_config import config

        config.default_grain_exact(False)
        for name in [n for n in sys.modules if n == _ALIAS or n.startswith(_ALIAS + ".")]:
            mod = sys.modules[name]
            if getattr(mod, "__name__", "").split(".")[0] == _TARGET:
                del sys.modules[name]
        for name in private_paths.installed_modules():
            del sys.modules[name]
        target = sys.modules.get(_TARGET)
        if target is not None and "_src" in vars(target):  # set by `import grain._src...`
            delattr(target, "_src")


def install_from_env(environ: dict[str, str] | None = None) -> bool:
    """Installs the alias as ``GRAIN_CORE_AS_GRAIN`` says (see the module docstring); returns
    whether the alias is installed afterwards."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_VAR, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return is_grain_alias_installed()
    if value not in ("1", "true", "yes", "on", "force"):
        warnings.warn(
            f"{ENV_VAR}={value!r} is not understood (use 1, or force to replace an installed "
            "google grain); `grain` is left alone.",
            RuntimeWarning,
            stacklevel=2,
        )
        return is_grain_alias_installed()
    try:
        install_grain_alias(replace_installed=value == "force")
    except GrainAliasError as e:
        warnings.warn(f"{ENV_VAR}={value}: {e}", RuntimeWarning, stacklevel=2)
    return is_grain_alias_installed()
