"""Name lookups that need the first-party plugins installed (the kernel session has only range)."""

from __future__ import annotations

import pytest

import grain_core as grain


def test_name_looked_up_in_the_wrong_namespace_says_where_it_is(fresh_plugins):
    with pytest.raises(AttributeError) as raised:
        grain.sources.InterleaveIterDataset  # noqa: B018
    message = str(raised.value)
    assert "grain-plugin-interleave provides it as grain_core.experimental.InterleaveIterDataset" in message
    assert "install" not in message


def test_misspelled_plugin_name_suggests_the_installed_one():
    with pytest.raises(AttributeError, match=r"Did you mean 'WindowShuffleIterDataset'\?$"):
        grain.experimental.WindowShuffleIterDatset  # noqa: B018
