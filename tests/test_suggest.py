"""Did-you-mean hints for misspelled plugin, source, transform and factory names."""

from __future__ import annotations

import warnings

import pytest

import grain_core as grain
from grain_core import plugins
from grain_core.suggest import close_matches, did_you_mean


def test_did_you_mean_picks_the_closest_public_name():
    names = ["WindowShuffleIterDataset", "WindowShuffleMapDataset", "_WindowShuffleIterDatase"]
    assert did_you_mean("WindowShuffleIterDatset", names) == " Did you mean 'WindowShuffleIterDataset'?"
    assert did_you_mean("windowshuffleiterdataset", names) == " Did you mean 'WindowShuffleIterDataset'?"
    assert did_you_mean("Zzz", names) == ""
    assert close_matches("_WindowShuffleIterDatase", names, n=3)[0] == "WindowShuffleIterDataset"


@pytest.mark.parametrize(
    "get, suggestion",
    [
        (lambda: grain.experimental.devce_put, "device_put"),
        (lambda: grain.sources.RangeDataSorce, "RangeDataSource"),
        (lambda: grain.Mapdataset, "MapDataset"),
        (lambda: grain.MapDataset.rnage, "range"),
        (lambda: grain.MapDataset.sourc, "source"),
        (lambda: grain.IterDataset.mixx, "mix"),
        (lambda: grain.transforms.Mapp, "Map"),
        (lambda: grain.transforms.FilterTransfrom, "FilterTransform"),
    ],
)
def test_misspelled_names_suggest_the_right_one(get, suggestion):
    with pytest.raises(AttributeError, match=rf"Did you mean '{suggestion}'\?$"):
        get()


def test_unrelated_names_get_no_suggestion_and_missing_plugins_keep_their_install_hint(
    fresh_plugins, monkeypatch
):
    with pytest.raises(AttributeError, match=r"has no attribute 'Nonexistent'\.$"):
        grain.experimental.Nonexistent  # noqa: B018
    monkeypatch.setenv(plugins.ENV_BLOCK, "range,broken")
    fresh_plugins.reload()
    with pytest.raises(AttributeError) as info:
        grain.MapDataset.range(3)
    assert "grain-plugin-range" in str(info.value) and "Did you mean" not in str(info.value)


def test_misspelled_plugin_in_block_or_allow_list_warns(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_BLOCK, "rnage,broken")
    with pytest.warns(RuntimeWarning, match=r"GRAIN_CORE_BLOCK_PLUGINS names 'rnage'.*Did you mean 'range'\?"):
        plugins.load_plugins()
    fresh_plugins.reload()
    monkeypatch.setenv(plugins.ENV_BLOCK, "broken")
    monkeypatch.setenv(plugins.ENV_ALLOW, "grain-plugin-rang")
    with pytest.warns(RuntimeWarning, match=r"GRAIN_CORE_PLUGINS names 'grain-plugin-rang'.*Did you mean 'grain-plugin-range'\?"):
        plugins.load_plugins()
    fresh_plugins.reload()
    monkeypatch.delenv(plugins.ENV_ALLOW)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plugins.load_plugins()  # names that exist: no warning
