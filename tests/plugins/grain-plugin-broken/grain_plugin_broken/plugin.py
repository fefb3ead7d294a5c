"""Fails on import, as a plugin with a missing dependency would."""

import grain_plugin_broken_missing_dependency  # noqa: F401
