"""The app's chart data: the x axes start wide enough for whole-number ticks."""

from lantern_demo.steps import Step
from lantern_demo.ui import plots


def test_the_charts_span_at_least_ten_passes_from_the_first_frame():
    prefill = [Step(0, 0, [5], [0], 0, [0.0], [0.9], [False], 0.0)]
    bars = plots.per_step_frame(prefill)
    assert bars["target pass"].max() == plots.MIN_AXIS_PASSES == 10
    assert bars[bars["target pass"] == 1]["tokens"].sum() == 1 and bars[bars["target pass"] > 1]["tokens"].sum() == 0
    lines = plots.cumulative_frame({"method": prefill}, 256)
    assert lines[lines["run"] == plots.AR_SERIES]["target passes"].max() == 10
