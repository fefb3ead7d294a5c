"""PEP 562 module attributes that resolve on first use: kernel submodules and plugin names."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from grain_core.suggest import did_you_mean


def lazy_module_attrs(
    module_name: str,
    kernel: Mapping[str, str],
    plugin_namespaces: Iterable[str],
    module_globals: dict[str, Any],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Returns ``(__getattr__, __dir__)`` for ``module_name``.

    ``kernel`` maps attribute names to ``"package.module"`` (or ``"package.module:attr"``) imported
    on first access; ``"@package.module"`` stands for the module itself. A submodule of a package
    ``module_name`` is imported. Other names are looked up among plugin registrations in
    ``plugin_namespaces``; a name no installed plugin provides raises ``AttributeError`` naming the
    ``grain-plugin-*`` distribution to install, where one is known, else suggesting the closest
    name (:func:`grain_core.suggest.did_you_mean`).
    """
    spaces = tuple(plugin_namespaces)

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        target = kernel.get(name)
        if target is not None:
            if target.startswith("@"):
                value = importlib.import_module(target[1:])
            else:
                mod, _, attr = target.partition(":")
                value = getattr(importlib.import_module(mod), attr or name)
            module_globals[name] = value
            return value
        if "__path__" in module_globals and importlib.util.find_spec(f"{module_name}.{name}"):
            # A submodule not imported yet (``from grain_core import author`` in a plugin's own
            # module): import it, never look among plugin names, which would load the plugins in
            # the middle of that plugin's import.
            return importlib.import_module(f"{module_name}.{name}")
        from grain_core.plugins import registry

        last: Exception | None = None
        for space in spaces:
            try:
                return registry.lookup(space, name, module_name)
            except registry.PluginNameError as e:
                last = e
        if last is not None:
            if registry.KNOWN_PROVIDERS.get(name) is None:  # no install hint: maybe a typo
                raise registry.PluginNameError(f"{last}{did_you_mean(name, __dir__())}") from None
            raise last
        raise AttributeError(
            f"module {module_name!r} has no attribute {name!r}.{did_you_mean(name, __dir__())}"
        )

    def __dir__() -> list[str]:
        from grain_core.plugins import registry

        names = set(module_globals) | set(kernel)
        for space in spaces:
            names |= set(registry.names(space))
        return sorted(names)

    return __getattr__, __dir__
