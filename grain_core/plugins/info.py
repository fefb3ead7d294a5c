"""What the plugin registry records and raises: one plugin as discovery saw it (:class:`PluginInfo`),
one name it provides (:class:`Provided`), and the plugin errors. Re-exported by
:mod:`grain_core.plugins`."""

from __future__ import annotations

import dataclasses
from typing import Any

#: :attr:`PluginInfo.status` of the kernel's built-in plugins (:meth:`Registry.add_builtin`).
BUILTIN_STATUS = "built-in"

class PluginError(RuntimeError):
    """A plugin failed to load (raised only in strict mode) or registered something invalid."""


class PluginConflictError(PluginError):
    """Two plugins registered the same name."""


class PluginNameError(AttributeError):
    """A plugin-provided name is not available; the message says which distribution provides it."""


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
    # "loaded", "failed", "blocked", "not allowed", "autoload disabled", "registered", "built-in"
    status: str
    error: str = ""
    provides: list[str] = dataclasses.field(default_factory=list)
    reason: str = ""  # why it is (not) loaded, in words

    @property
    def label(self) -> str:
        """``'name' (distribution version)`` for messages."""
        where = f" ({self.distribution} {self.version})".rstrip() if self.distribution else ""
        return f"{self.name!r}{where.replace(' )', ')')}"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
