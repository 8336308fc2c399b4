"""The method vocabulary and the preset table: one owner each, read by the engine, the app and the bench."""

import pytest

from lantern_demo.hub import PRESETS
from lantern_demo.methods import BASELINES, DRAFTER_FREE, METHOD_TABLE, METHODS, RELAXED, DecodeConfig
from lantern_demo.presets import CONTROL_DEFAULTS, SETTINGS, controls, sampling
from lantern_demo.ui import INPUT_NAMES


def test_every_preset_has_settings_whose_controls_are_inputs():
    assert set(PRESETS) <= set(SETTINGS)
    assert set(CONTROL_DEFAULTS) == set(INPUT_NAMES) - {"prompt", "model"}
    for name, spec in SETTINGS.items():
        assert set(spec.controls) <= set(CONTROL_DEFAULTS), name
        assert spec.text_encoder in ("saved", "t5", "random")


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_preset_defaults_are_valid_on_their_own_neighbour_table(name):
    values = controls(name)
    assert 1 <= values["k"] <= SETTINGS[name].max_k  # the app's k starts inside the table, uncapped
    for method in METHODS:
        DecodeConfig.from_values(values, method=method).validate(SETTINGS[name].max_k)
    assert sampling(name) == DecodeConfig.from_values(values).sampling


def test_from_values_resolves_auto_and_rejects_wrong_kinds():
    values = controls("tiny-random")
    assert DecodeConfig.from_values(values, method="lantern++").draft == "static"
    assert DecodeConfig.from_values(values, method="sjd", draft="chain").draft is None  # the SJD methods: a window
    assert DecodeConfig.from_values(values, method="sd", draft="tree").shape == "tree"
    with pytest.raises(ValueError, match="gamma must be a whole number"):
        DecodeConfig.from_values(values, gamma=2.5)
    with pytest.raises(ValueError, match="coupled must be true or false"):
        DecodeConfig.from_values(values, coupled="yes")


def test_the_vocabulary_views_agree_with_the_table():
    assert METHODS == tuple(m.name for m in METHOD_TABLE)
    assert set(RELAXED).isdisjoint(BASELINES) and set(DRAFTER_FREE) <= set(METHODS)
    assert {m.name for m in METHOD_TABLE if m.uses_lam} <= set(RELAXED)


def test_eagle_always_drafts_its_tree_and_lantern_the_presets_fastest_shape():
    from lantern_demo.presets import config

    for name in SETTINGS:
        assert config(name, method="eagle").shape == "tree"
        assert config(name, method="eagle", draft="chain").shape == "tree"  # a chain would be SD
        assert config(name, method="sd").shape == "chain"
    assert config("emoji", method="lantern").shape == "chain"  # docs/bench/results.json: 0.78x vs AR, tree 0.47x
    assert config("llamagen-t2i", method="lantern").shape == "tree"  # the paper's EAGLE-2 tree
    assert config("emoji", method="lantern", draft="tree").shape == "tree"  # an explicit choice is kept
