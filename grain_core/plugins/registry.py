"""Plugin discovery and the registry of what plugins provide.

Discovery runs once, lazily (on the first lookup of a plugin-provided name), under a lock. Each entry
point in the ``grain_core`` group is loaded on its own: one that fails is recorded and reported as a
warning naming it, unless strict mode re-raises. Environment controls (read at discovery time):

``GRAIN_CORE_DISABLE_PLUGIN_AUTOLOAD=1``
    load no entry points except those named in ``GRAIN_CORE_PLUGINS``; plugins passed to
    :func:`register` are used as always.
``GRAIN_CORE_PLUGINS=a,b``
    allow-list: load only these entry-point or distribution names.
``GRAIN_CORE_BLOCK_PLUGINS=a,b``
    block-list: never load these.
``GRAIN_CORE_STRICT_PLUGINS=1``
    a plugin that fails to load, or two plugins claiming one name, raises instead of warning.

A name in the allow- or block-list that matches no installed plugin warns, with the closest name.
Environment variables only select among entry points: no module is ever imported by a name given
there. A plugin fails to load (a warning naming it, or an error in strict mode), and the others load
as usual, when importing it fails, when it implements a hook grain_core does not declare, when a hook
implementation's signature does not match the hook, or when what it registers is invalid.

Discovery scans ``sys.path`` without the working directory unless the process started with it there
(:mod:`grain_core._safepath`): a ``*.dist-info`` planted where a job is started is never seen.

Worker processes re-run discovery with the same environment, and re-register the plugins that were
registered explicitly by module name, so they see the same plugins.

The kernel provides its own names through the same hooks, as *built-in* plugins
(:meth:`Registry.add_builtin`; e.g. ``grain_core.runtime.builtin`` registers the ``"processes"``
runtime): they load before every other plugin, whatever the environment says, are never unregistered,
are not listed by :func:`grain_core.plugins.list_plugins`, and a name one of them registers cannot be
taken by another plugin (that plugin fails to load, saying so).
"""

from __future__ import annotations

import importlib
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pluggy

from grain_core import _safepath
from grain_core.plugins import hookspecs
from grain_core.plugins.hook_validation import validate_plugin
from grain_core.plugins.info import (
    BUILTIN_STATUS,
    PluginConflictError,
    PluginError,
    PluginInfo,
    PluginNameError,
    Provided,
)
from grain_core.suggest import did_you_mean

ENTRY_POINT_GROUP = "grain_core"
NAMESPACES = ("sources", "experimental", "factories")

ENV_DISABLE_AUTOLOAD = "GRAIN_CORE_DISABLE_PLUGIN_AUTOLOAD"
ENV_ALLOW = "GRAIN_CORE_PLUGINS"
ENV_BLOCK = "GRAIN_CORE_BLOCK_PLUGINS"
ENV_STRICT = "GRAIN_CORE_STRICT_PLUGINS"

# The one table of which of grain_core's own plugins provides which name, each as ``<where>.<Name>``
# (``sources``, ``experimental``, ``MapDataset``/``IterDataset`` for factories, ``runtimes``). The
# install hints below, the tables in docs/plugins.md and README.md, and the built-in plugins'
# actual registrations are checked against it (tests/test_providers.py).
PROVIDERS: dict[str, tuple[str, ...]] = {
    "grain-plugin-range": ("sources.RangeDataSource", "MapDataset.range"),
    "grain-plugin-arrayrecord": ("sources.ArrayRecordDataSource", "sources.FileInstruction"),
    "grain-plugin-parquet": (
        "sources.ParquetDataSource",
        "sources.ParquetIterDataset",
        "experimental.ParquetIterDataset",
    ),
    "grain-plugin-tfds": ("sources.TfdsDataSource",),
    "grain-plugin-tfrecord": ("sources.TFRecordIterDataset", "experimental.TFRecordIterDataset"),
    "grain-plugin-packing": (
        "experimental.FirstFitPackIterDataset",
        "experimental.BestFitPackIterDataset",
        "experimental.ConcatThenSplitIterDataset",
        "experimental.BOSHandling",
    ),
    "grain-plugin-interleave": ("experimental.InterleaveIterDataset",),
    "grain-plugin-window-shuffle": (
        "experimental.WindowShuffleMapDataset",
        "experimental.WindowShuffleIterDataset",
    ),
    "grain-plugin-ray": ("runtimes.ray",),
    "grain-plugin-hf": (
        "sources.HuggingFaceDataSource",
        "sources.HuggingFaceIterDataset",
        "experimental.HuggingFaceIterDataset",
    ),
}

# Name -> distribution, for install hints (derived from PROVIDERS).
KNOWN_PROVIDERS: dict[str, str] = {
    qualified.rpartition(".")[2]: dist for dist, names in PROVIDERS.items() for qualified in names
}


def registry_key(qualified: str) -> tuple[str, str]:
    """The :class:`Discovery` key of a ``<where>.<Name>`` of :data:`PROVIDERS`."""
    where, _, name = qualified.rpartition(".")
    return (f"factories:{where}" if where in ("MapDataset", "IterDataset") else where, name)


# What each hook registers, in words (for errors).
_KIND_WORDS = {
    "register_sources": "source",
    "register_transforms": "transformation",
    "register_dataset_factories": "dataset factory",
    "register_runtimes": "runtime",
}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _names(value: str | None) -> set[str]:
    return {v.strip() for v in (value or "").split(",") if v.strip()}


def normalize(name: str) -> str:
    """A distribution name in its PEP 503 normal form (``Grain_Plugin.X`` → ``grain-plugin-x``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _entry_points() -> Iterator[Any]:
    """The ``grain_core`` entry points of the distributions on :func:`_safepath.discovery_path`,
    one distribution per name (the first on the path, as the import system would)."""
    import importlib_metadata

    seen: set[str] = set()
    for dist in importlib_metadata.distributions(path=_safepath.discovery_path()):
        key = normalize(dist.metadata["Name"] or "")
        if key in seen:
            continue
        seen.add(key)
        yield from dist.entry_points.select(group=ENTRY_POINT_GROUP)


def installed_version(distribution: str) -> str | None:
    """The version of ``distribution`` on the discovery path, or None when it is not installed."""
    import importlib_metadata

    for dist in importlib_metadata.distributions(path=_safepath.discovery_path()):
        if normalize(dist.metadata["Name"] or "") == normalize(distribution):
            return dist.version
    return None


# Factory names each dataset class reserves (its own methods), declared by the dataset kernel
# through :func:`reserve_factory_names` (this module never imports the kernel: docs/architecture.md).
_RESERVED: dict[str, Callable[[], Iterable[str]]] = {}


def reserve_factory_names(on: str, names: Callable[[], Iterable[str]]) -> None:
    """Declares that plugin factories on the class ``on`` cannot take the names ``names()``."""
    _RESERVED[on] = names


class Discovery:
    """One discovery's result: the pluggy manager, the plugin list and every provided name.

    Built whole by :meth:`Registry.ensure_loaded` and then swapped in, so a lookup always sees one
    complete discovery, never a half-built one."""

    def __init__(self):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        #: The kernel's built-in plugins (:meth:`Registry.add_builtin`), kept out of ``plugins``.
        self.builtins: dict[str, PluginInfo] = {}
        self.provided: dict[tuple[str, str], Provided] = {}
        self.conflicts: dict[tuple[str, str], list[Provided]] = {}

    # --- loading ----------------------------------------------------------------------------------

    def load(
        self, explicit: Sequence[tuple[Any, str]], builtins: Sequence[tuple[Any, str]] = ()
    ) -> None:
        """Loads the kernel's built-in plugins, then the entry points (those the environment
        selects), then the explicit plugins."""
        self.load_builtins(builtins)
        self._load_entry_points()
        for plugin, name in explicit:
            self._try_add(plugin, PluginInfo(name, "", "", "", "registered"))

    def load_builtins(self, builtins: Sequence[tuple[Any, str]]) -> None:
        """Loads the kernel's built-in plugins (a failure is a kernel bug: raised, never skipped)."""
        for plugin, name in builtins:
            self._add(plugin, PluginInfo(name, "", "", "", BUILTIN_STATUS, reason="part of grain_core"))

    def _load_entry_points(self) -> None:
        autoload = not _truthy(os.environ.get(ENV_DISABLE_AUTOLOAD))
        allow = _names(os.environ.get(ENV_ALLOW))
        block = _names(os.environ.get(ENV_BLOCK))
        allow_keys = {normalize(n) for n in allow}
        block_keys = {normalize(n) for n in block}
        known: set[str] = set()
        seen: set[str] = set()
        for ep in _entry_points():
            dist = ep.dist.name if ep.dist else ""
            version = ep.dist.version if ep.dist else ""
            known |= {ep.name, dist} - {""}
            key = f"{dist}:{ep.name}"
            if key in seen:
                continue
            seen.add(key)
            info = PluginInfo(ep.name, dist, version, ep.value, "loaded")
            names = {normalize(ep.name), normalize(dist)} - {""}
            if names & block_keys:
                info.status, info.reason = "blocked", f"named in {ENV_BLOCK}"
            elif not autoload and not names & allow_keys:
                info.status = "autoload disabled"
                info.reason = f"{ENV_DISABLE_AUTOLOAD} is set and {ENV_ALLOW} does not name it"
            elif allow and not names & allow_keys:
                info.status, info.reason = "not allowed", f"not named in {ENV_ALLOW}={','.join(sorted(allow))}"
            if info.status != "loaded":
                self.plugins[ep.name] = info
                continue
            info.reason = f"named in {ENV_ALLOW}" if allow else "installed (entry point autoloaded)"
            self._try_add(ep, info)
        for variable, listed in ((ENV_ALLOW, allow), (ENV_BLOCK, block)):
            known_keys = {normalize(k) for k in known}
            for name in sorted(n for n in listed if normalize(n) not in known_keys):
                warnings.warn(
                    f"{variable} names {name!r}, which is no installed plugin or distribution."
                    f"{did_you_mean(name, known)} Installed: {', '.join(sorted(known)) or 'none'}.",
                    RuntimeWarning,
                    stacklevel=5,
                )

    def _try_add(self, source: Any, info: PluginInfo) -> None:
        """Loads one plugin (an entry point, loaded here, or an object); a failure is recorded,
        warned about (raised in strict mode) and leaves no trace of the plugin."""
        try:
            plugin = source.load() if info.entry_point else source
            self._add(plugin, info)
        except Exception as e:  # a broken plugin must not break grain_core
            self._discard(info.name)
            info.status, info.provides = "failed", []
            info.error = str(e) if isinstance(e, PluginError) else f"{type(e).__name__}: {e}"
            info.reason = "failed to load"
            self.plugins[info.name] = info
            if _truthy(os.environ.get(ENV_STRICT)):
                if isinstance(e, PluginError):
                    raise
                raise PluginError(
                    f"grain_core plugin {info.name!r} from {info.distribution or '?'} {info.version} "
                    f"failed to load: {info.error}"
                ) from e
            warnings.warn(
                f"grain_core plugin {info.label} failed to load and is skipped: {info.error}. "
                f"Set {ENV_BLOCK}={info.name} to silence this, or {ENV_STRICT}=1 to make it an "
                "error.",
                RuntimeWarning,
                stacklevel=5,
            )

    def _add(self, plugin: Any, info: PluginInfo) -> None:
        if self.pm.is_registered(plugin):
            # Already loaded (e.g. from its entry point, then registered explicitly too): its hooks
            # ran once; running them again would only report conflicts with itself.
            self.plugins.setdefault(info.name, info)
            return
        validate_plugin(self.pm, plugin, info)
        (self.builtins if info.status == BUILTIN_STATUS else self.plugins)[info.name] = info
        hook_impls = {
            "register_sources": ("sources",),
            "register_transforms": ("experimental",),
            "register_dataset_factories": ("factories",),
            "register_runtimes": ("runtimes",),
        }
        for hook_name in hook_impls:
            hook = getattr(self.pm.hook, hook_name)
            for impl in hook.get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                register = self._make_register(hook_name, info)
                impl.function(**{arg: register for arg in impl.argnames})

    def _discard(self, plugin_name: str) -> None:
        """Forgets everything a plugin that failed half-way through loading registered."""
        self.provided = {k: v for k, v in self.provided.items() if v.plugin != plugin_name}
        for key in list(self.conflicts):
            kept = [p for p in self.conflicts[key] if p.plugin != plugin_name]
            if len(kept) > 1:
                self.conflicts[key] = kept
            else:
                del self.conflicts[key]
                if kept:
                    self.provided[key] = kept[0]
        registered = self.pm.get_plugin(plugin_name)
        if registered is not None:
            self.pm.unregister(registered, plugin_name)

    def _make_register(self, hook_name: str, info: PluginInfo):
        def register(obj: Any, name: str | None = None, **options: Any) -> None:
            self._record(hook_name, info, obj, name, options)

        return register

    def _record(self, hook_name: str, info: PluginInfo, obj: Any, name: str | None, options: dict) -> None:
        name = name or getattr(obj, "__name__", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise PluginError(
                f"plugin {info.name!r} registered {obj!r} without a valid name; pass name=..."
            )
        if not callable(obj):
            raise PluginError(f"plugin {info.name!r} registered {name!r}, which is not callable.")
        if hook_name == "register_sources":
            unknown = set(options) - {"experimental"}
            spaces = ["sources"] + (["experimental"] if options.get("experimental") else [])
            on = ""
        elif hook_name == "register_transforms":
            unknown = set(options)
            spaces = ["experimental"]
            on = ""
        elif hook_name == "register_runtimes":
            unknown = set(options)
            spaces = ["runtimes"]
            on = ""
        else:
            unknown = set(options) - {"on"}
            on = options.get("on", "MapDataset")
            if on not in ("MapDataset", "IterDataset"):
                raise PluginError(f"plugin {info.name!r}: factory {name!r} has on={on!r}.")
            if name in set(_RESERVED.get(on, lambda: ())()):
                raise PluginError(
                    f"plugin {info.name!r} cannot register {on}.{name}: the kernel defines it."
                )
            spaces = [f"factories:{on}"]
        if unknown:
            raise PluginError(f"plugin {info.name!r}: unknown register options {sorted(unknown)}.")
        for space in spaces:
            other = self.provided.get((space, name))
            if other is not None and other.plugin in self.builtins and other.obj is not obj:
                raise PluginError(
                    f"plugin {info.name!r} cannot register the {_KIND_WORDS[hook_name]} {name!r}: "
                    f"the kernel's (built-in plugin {other.plugin!r}); register it under another name."
                )
        for space in spaces:
            item = Provided(space, name, obj, info.name, info.distribution, info.version, on)
            key = (space, name)
            other = self.provided.get(key)
            if other is not None and other.obj is not obj:
                self.conflicts.setdefault(key, [other]).append(item)
                if _truthy(os.environ.get(ENV_STRICT)):
                    raise self._conflict_error(key)
                continue
            self.provided[key] = item
        info.provides.append(f"{on + '.' if on else ''}{name}")

    def _conflict_error(self, key: tuple[str, str]) -> PluginConflictError:
        claims = ", ".join(
            f"{p.distribution or p.plugin} {p.version}".strip() for p in self.conflicts[key]
        )
        return PluginConflictError(
            f"{key[1]!r} is provided by more than one plugin: {claims}. Uninstall one of them or "
            f"block one with {ENV_BLOCK}=<name>."
        )

    # --- lookups ----------------------------------------------------------------------------------

    def lookup(self, namespace: str, name: str, where: str) -> Any:
        key = (namespace, name)
        if key in self.conflicts:
            raise self._conflict_error(key)
        item = self.provided.get(key)
        if item is not None:
            return item.obj
        raise PluginNameError(self._missing_message(name, where))

    def _missing_message(self, name: str, where: str) -> str:
        provider = KNOWN_PROVIDERS.get(name)
        if provider is None:
            return f"{where} has no attribute {name!r}."
        seen = [p for p in self.plugins.values() if normalize(p.distribution) == normalize(provider)]
        if seen:
            p = seen[0]
            if p.status == "loaded" and any(q.rpartition(".")[2] == name for q in p.provides):
                elsewhere = [q for q in PROVIDERS.get(provider, ()) if q.rpartition(".")[2] == name]
                return (
                    f"{where} has no attribute {name!r}; {provider} provides it as "
                    f"{' and '.join('grain_core.' + q for q in elsewhere) or name}."
                )
            if p.status == "loaded":
                return (
                    f"{where}.{name} comes from {provider}, which is installed ({p.version}) and "
                    f"loaded but does not provide it (it provides {', '.join(p.provides) or 'nothing'}); "
                    f"upgrade it: pip install -U {provider}"
                )
            detail = f": {p.error}" if p.error else f" ({p.reason})" if p.reason else ""
            return f"{where}.{name} comes from {provider}, which is installed but {p.status}{detail}."
        version = installed_version(provider)
        if version is not None:
            return (
                f"{where}.{name} comes from {provider}, which is installed ({version}) but declares "
                f"no {ENTRY_POINT_GROUP!r} entry point; reinstall it: pip install --force-reinstall "
                f"{provider}"
            )
        return (
            f"{where}.{name} is provided by the plugin {provider}; install it: pip install "
            f"{provider} (from a grain_core checkout: pip install -e plugins/{provider})"
        )

    def names(self, namespace: str) -> list[str]:
        return sorted({n for (space, n) in self.provided if space == namespace})


class Registry:
    """The process-wide registry: explicit registrations and the current :class:`Discovery`."""

    def __init__(self):
        self._lock = threading.RLock()
        self._loaded = False
        self._explicit: list[tuple[Any, str]] = []
        self._builtin: list[tuple[Any, str]] = []
        self._current = Discovery()
        # What the built-in plugins provide, found without scanning the installed plugins.
        self._builtin_provided: dict[tuple[str, str], Provided] | None = None

    def ensure_loaded(self) -> Discovery:
        """Runs discovery if it has not run since the last change; returns the current result."""
        if self._loaded:
            return self._current
        with self._lock:
            if not self._loaded:
                discovery = Discovery()
                discovery.load(list(self._explicit), list(self._builtin))
                self._current = discovery
                self._loaded = True
            return self._current

    @property
    def pm(self) -> pluggy.PluginManager:
        return self.ensure_loaded().pm

    @property
    def plugins(self) -> dict[str, PluginInfo]:
        return self.ensure_loaded().plugins

    @property
    def provided(self) -> dict[tuple[str, str], Provided]:
        return self.ensure_loaded().provided

    def lookup(self, namespace: str, name: str, where: str) -> Any:
        # A built-in plugin's name is found without discovering the installed plugins: no other
        # plugin can take it, so discovery would return the same object (mp_prefetch's default
        # "processes" runtime costs no scan of the installed distributions, as before it was a
        # plugin).
        if not self._loaded:
            item = self._builtins_only().get((namespace, name))
            if item is not None:
                return item.obj
        return self.ensure_loaded().lookup(namespace, name, where)

    def _builtins_only(self) -> dict[tuple[str, str], Provided]:
        provided = self._builtin_provided
        if provided is None:
            with self._lock:
                if self._builtin_provided is None:
                    discovery = Discovery()
                    discovery.load_builtins(list(self._builtin))
                    self._builtin_provided = discovery.provided
                provided = self._builtin_provided
        return provided

    def names(self, namespace: str) -> list[str]:
        return self.ensure_loaded().names(namespace)

    # --- explicit registration ----------------------------------------------------------------------

    def register(self, plugin: Any, name: str | None = None) -> None:
        """Adds ``plugin``; raises :class:`PluginError` (naming it, and registering nothing) when
        it implements a hook grain_core does not declare or with a signature that does not match.
        What its hooks register is checked at discovery, like an installed plugin's."""
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        scratch = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        scratch.add_hookspecs(hookspecs)
        validate_plugin(scratch, plugin, PluginInfo(name, "", "", "", "registered"))
        with self._lock:
            self._explicit.append((plugin, name))
            self._loaded = False

    def add_builtin(self, plugin: Any, name: str) -> None:
        """Adds one of the kernel's own plugins (a module with ``@hookimpl`` functions, e.g.
        ``grain_core.runtime.builtin``), registered by the kernel as it loads: it is loaded before
        every other plugin at each discovery, whatever the environment selects; it is not listed
        by ``list_plugins``, and the names it registers cannot be taken by another plugin. Adding
        the same name again does nothing."""
        scratch = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        scratch.add_hookspecs(hookspecs)
        validate_plugin(scratch, plugin, PluginInfo(name, "", "", "", BUILTIN_STATUS))
        with self._lock:
            if any(n == name for _, n in self._builtin):
                return
            self._builtin.append((plugin, name))
            self._builtin_provided = None
            self._loaded = False

    def unregister(self, name: str) -> None:
        with self._lock:
            self._explicit = [(p, n) for p, n in self._explicit if n != name]
            self._loaded = False

    def reload(self) -> None:
        with self._lock:
            self._loaded = False

    def explicit_module_names(self) -> list[str]:
        """Explicitly registered plugins that are modules, by import name (for worker processes)."""
        return [p.__name__ for p, _ in self._explicit if isinstance(p, type(os))]


_REGISTRY = Registry()


def get_registry() -> Registry:
    """The process-wide plugin registry."""
    return _REGISTRY


def lookup(namespace: str, name: str, where: str) -> Any:
    """Returns what a plugin registered as ``name`` in ``namespace``, or raises with an install hint."""
    return _REGISTRY.lookup(namespace, name, where)


def dataset_factory(cls_name: str, name: str) -> Any:
    """Returns the plugin factory ``cls_name.name`` (e.g. ``MapDataset.range``)."""
    return _REGISTRY.lookup(f"factories:{cls_name}", name, cls_name)


def factory_names(cls_name: str) -> list[str]:
    return _REGISTRY.names(f"factories:{cls_name}")


def names(namespace: str) -> list[str]:
    """Names plugins provide in ``namespace`` (``sources`` or ``experimental``)."""
    return _REGISTRY.names(namespace)


def reimport_explicit(module_names: Iterable[str]) -> None:
    """Registers the named plugin modules in this process (used by worker processes)."""
    for m in module_names:
        if m not in _REGISTRY.explicit_module_names():
            _REGISTRY.register(importlib.import_module(m))
