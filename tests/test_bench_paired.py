"""The benchmark's paired speed statistics (lantern_demo.bench.paired), checked exactly."""

import math

import numpy as np
import pytest

from lantern_demo.bench.paired import level_with, paired_entry, paired_ratio, phrase


def test_constant_ratios_give_that_ratio_and_a_degenerate_interval():
    times = [1.0, 2.0, 4.0, 0.5, 3.0]
    r, (lo, hi) = paired_ratio([t * 1.25 for t in times], times)  # every ratio exactly 1.25
    assert r == pytest.approx(1.25, rel=1e-15)
    assert lo == hi == r


def test_known_set_gives_the_geometric_mean_of_paired_ratios_not_a_ratio_of_medians():
    ref = [1.0, 10.0, 100.0]
    times = [2.0, 5.0, 200.0]  # per-prompt ratios 0.5, 2, 0.5
    r, _ = paired_ratio(ref, times)
    assert r == pytest.approx(0.5 ** (1 / 3), rel=1e-12)
    # the ratio of medians over the prompts (10 / 5 = 2) says the opposite
    assert np.median(ref) / np.median(times) == 2.0 and r < 1.0


def test_inverse_comparison_inverts_the_ratio_and_the_interval():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(0.5, 2.0, 12), rng.uniform(0.5, 2.0, 12)
    r, (lo, hi) = paired_ratio(a, b, seed=1)
    r2, (lo2, hi2) = paired_ratio(b, a, seed=1)
    assert r * r2 == pytest.approx(1.0, rel=1e-12)
    # same resampled prompts: the interval of the inverse is the inverse interval
    assert lo * hi2 == pytest.approx(1.0, rel=1e-9) and hi * lo2 == pytest.approx(1.0, rel=1e-9)


def test_interval_contains_the_estimate_and_widens_with_noise():
    eps = np.random.default_rng(0).normal(size=16)
    eps -= eps.mean()  # log-ratios centred on log 2: the geometric mean is exactly 2
    ref = np.ones(16)
    widths = []
    for sigma in (0.01, 0.1, 0.3):
        r, (lo, hi) = paired_ratio(ref, ref / (2.0 * np.exp(sigma * eps)), seed=0)
        assert r == pytest.approx(2.0, rel=1e-12)
        assert lo < r < hi
        widths.append(math.log(hi / lo))
    assert widths[0] < widths[1] < widths[2]
    # log-width grows in proportion to the noise (same resamples, log-ratios scaled)
    assert widths[2] / widths[1] == pytest.approx(3.0, rel=1e-9)


def test_seeded_and_level_with():
    rng = np.random.default_rng(5)
    a, b = rng.uniform(1, 2, 8), rng.uniform(1, 2, 8)
    assert paired_entry(a, b, seed=7) == paired_entry(a, b, seed=7)
    e = {"ratio": 1.02, "ci95": [0.95, 1.08]}
    assert level_with(e) and phrase(e, "SD") == "level with SD (1.02x [0.95, 1.08])"
    f = {"ratio": 1.28, "ci95": [1.2, 1.35]}
    assert not level_with(f) and phrase(f, "AR") == "1.28x [1.20, 1.35] vs AR"
    assert not level_with({"ratio": 0.8, "ci95": [0.7, 0.9]})


@pytest.mark.parametrize("ref, times, word", [
    ([], [], "equally long"), ([1.0, 2.0], [1.0], "equally long"), ([1.0, 0.0], [1.0, 1.0], "reference"),
    ([1.0, 1.0], [1.0, float("nan")], "times"),
])
def test_bad_input_names_the_argument(ref, times, word):
    with pytest.raises(ValueError, match=word):
        paired_ratio(ref, times)
