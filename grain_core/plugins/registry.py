"""Plugin discovery and the registry of what plugins provide.

Discovery runs once, lazily (on the first lookup of a plugin-provided name), under a lock. Each entry
point in the ``grain_core`` group is loaded on its own: one that fails is recorded and reported as a
warning naming it, unless strict mode re-raises. Environment controls (read at discovery time):

``GRAIN_CORE_DISABLE_PLUGIN_AUTOLOAD=1``
    load no entry points; only plugins passed to :func:`register` are used.
``GRAIN_CORE_PLUGINS=a,b``
    allow-list: load only these entry-point or distribution names.
``GRAIN_CORE_BLOCK_PLUGINS=a,b``
    block-list: never load these.
``GRAIN_CORE_STRICT_PLUGINS=1``
    a plugin that fails to load, or two plugins claiming one name, raises instead of warning.

Worker processes re-run discovery with the same environment, and re-register the plugins that were
registered explicitly by module name, so they see the same plugins.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
import warnings
from collections.abc import Iterable
from typing import Any

import importlib_metadata
import pluggy

from grain_core.plugins import hookspecs
from grain_core.suggest import did_you_mean

ENTRY_POINT_GROUP = "grain_core"
NAMESPACES = ("sources", "experimental", "factories")

ENV_DISABLE_AUTOLOAD = "GRAIN_CORE_DISABLE_PLUGIN_AUTOLOAD"
ENV_ALLOW = "GRAIN_CORE_PLUGINS"
ENV_BLOCK = "GRAIN_CORE_BLOCK_PLUGINS"
ENV_STRICT = "GRAIN_CORE_STRICT_PLUGINS"

# Names provided by grain_core's own plugins, for install hints when one is not installed.
KNOWN_PROVIDERS: dict[str, str] = {
    "RangeDataSource": "grain-plugin-range",
    "range": "grain-plugin-range",
    "ArrayRecordDataSource": "grain-plugin-arrayrecord",
    "FileInstruction": "grain-plugin-arrayrecord",
    "ParquetIterDataset": "grain-plugin-parquet",
    "ParquetDataSource": "grain-plugin-parquet",
    "TfdsDataSource": "grain-plugin-tfds",
    "FirstFitPackIterDataset": "grain-plugin-packing",
    "BestFitPackIterDataset": "grain-plugin-packing",
    "BOSHandling": "grain-plugin-packing",
    "ConcatThenSplitIterDataset": "grain-plugin-packing",
    "InterleaveIterDataset": "grain-plugin-interleave",
    "WindowShuffleMapDataset": "grain-plugin-window-shuffle",
    "WindowShuffleIterDataset": "grain-plugin-window-shuffle",
}


class PluginError(RuntimeError):
    """A plugin failed to load (raised only in strict mode) or registered something invalid."""


class PluginConflictError(PluginError):
    """Two plugins registered the same name."""


class PluginNameError(AttributeError):
    """A plugin-provided name is not available; the message says which distribution provides it."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _names(value: str | None) -> set[str]:
    return {v.strip() for v in (value or "").split(",") if v.strip()}


def _warn_unknown_names(variable: str, listed: set[str], known: set[str]) -> None:
    """Warns about names in an allow/block list that match no installed plugin when one is close
    (a typo there silently loads or skips the wrong plugins)."""
    for name in sorted(listed - known):
        hint = did_you_mean(name, known)
        if hint:
            warnings.warn(
                f"{variable} names {name!r}, which is no installed plugin or distribution.{hint}",
                RuntimeWarning,
                stacklevel=5,
            )


@dataclasses.dataclass
class Provided:
    """One thing a plugin registered."""

    namespace: str
    name: str
    obj: Any
    plugin: str
    distribution: str
    version: str
    on: str = ""


@dataclasses.dataclass
class PluginInfo:
    """One plugin as discovery saw it."""

    name: str
    distribution: str
    version: str
    entry_point: str
    status: str  # "loaded", "failed", "blocked", "not allowed", "registered"
    error: str = ""
    provides: list[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Discovery:
    """One discovery's result: the pluggy manager, the plugin list and every provided name.

    Built whole by :meth:`Registry.ensure_loaded` and then swapped in, so a lookup always sees one
    complete discovery, never a half-built one."""

    def __init__(self):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.provided: dict[tuple[str, str], Provided] = {}
        self.conflicts: dict[tuple[str, str], list[Provided]] = {}

    # --- loading ----------------------------------------------------------------------------------

    def load(self, explicit: list[tuple[Any, str]]) -> None:
        """Loads entry points (unless autoload is disabled) and then the explicit plugins."""
        if not _truthy(os.environ.get(ENV_DISABLE_AUTOLOAD)):
            self._load_entry_points()
        for plugin, name in explicit:
            self._add(plugin, PluginInfo(name, "", "", "", "registered"))

    def _load_entry_points(self) -> None:
        allow = _names(os.environ.get(ENV_ALLOW))
        block = _names(os.environ.get(ENV_BLOCK))
        strict = _truthy(os.environ.get(ENV_STRICT))
        seen: set[str] = set()
        known: set[str] = set()  # entry-point and distribution names, to check the lists against
        for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist else ""
            version = ep.dist.version if ep.dist else ""
            key = f"{dist}:{ep.name}"
            if key in seen:
                continue
            seen.add(key)
            known |= {ep.name, dist}
            info = PluginInfo(ep.name, dist, version, ep.value, "loaded")
            if block & {ep.name, dist}:
                info.status = "blocked"
                self.plugins[ep.name] = info
                continue
            if allow and not allow & {ep.name, dist}:
                info.status = "not allowed"
                self.plugins[ep.name] = info
                continue
            try:
                module = ep.load()
                self._add(module, info)
            except Exception as e:  # a broken plugin must not break grain_core
                self._discard(ep.name)
                info.status = "failed"
                info.provides = []
                info.error = f"{type(e).__name__}: {e}"
                self.plugins[ep.name] = info
                if strict:
                    raise PluginError(
                        f"grain_core plugin {ep.name!r} from {dist or '?'} {version} failed to load: "
                        f"{info.error}"
                    ) from e
                warnings.warn(
                    f"grain_core plugin {ep.name!r} ({dist} {version}) failed to load and is "
                    f"skipped: {info.error}. Set {ENV_BLOCK}={ep.name} to silence this, or "
                    f"{ENV_STRICT}=1 to make it an error.",
                    RuntimeWarning,
                    stacklevel=4,
                )
        _warn_unknown_names(ENV_ALLOW, allow, known)
        _warn_unknown_names(ENV_BLOCK, block, known)

    def _add(self, plugin: Any, info: PluginInfo) -> None:
        if self.pm.is_registered(plugin):
            # Already loaded (e.g. from its entry point, then registered explicitly too): its hooks
            # ran once; running them again would only report conflicts with itself.
            self.plugins.setdefault(info.name, info)
            return
        self.pm.register(plugin, name=info.name if info.name not in self.plugins else None)
        self.plugins[info.name] = info
        hook_impls = {
            "register_sources": ("sources",),
            "register_transforms": ("experimental",),
            "register_dataset_factories": ("factories",),
        }
        for hook_name in hook_impls:
            hook = getattr(self.pm.hook, hook_name)
            for impl in hook.get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                impl.function(register=self._make_register(hook_name, info))

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
            self.pm.unregister(registered)

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
        else:
            unknown = set(options) - {"on"}
            on = options.get("on", "MapDataset")
            if on not in ("MapDataset", "IterDataset"):
                raise PluginError(f"plugin {info.name!r}: factory {name!r} has on={on!r}.")
            from grain_core.dataset import base

            if name in vars(getattr(base, on)) or name in vars(type(getattr(base, on))):
                raise PluginError(
                    f"plugin {info.name!r} cannot register {on}.{name}: the kernel defines it."
                )
            spaces = [f"factories:{on}"]
        if unknown:
            raise PluginError(f"plugin {info.name!r}: unknown register options {sorted(unknown)}.")
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
        failed = [
            p for p in self.plugins.values() if p.distribution == provider and p.status != "loaded"
        ]
        if failed:
            p = failed[0]
            detail = f": {p.error}" if p.error else ""
            return f"{where}.{name} comes from {provider}, which is installed but {p.status}{detail}."
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
        self._current = Discovery()

    def ensure_loaded(self) -> Discovery:
        """Runs discovery if it has not run since the last change; returns the current result."""
        if self._loaded:
            return self._current
        with self._lock:
            if not self._loaded:
                discovery = Discovery()
                discovery.load(list(self._explicit))
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
        return self.ensure_loaded().lookup(namespace, name, where)

    def names(self, namespace: str) -> list[str]:
        return self.ensure_loaded().names(namespace)

    # --- explicit registration ----------------------------------------------------------------------

    def register(self, plugin: Any, name: str | None = None) -> None:
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        with self._lock:
            self._explicit.append((plugin, name))
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
