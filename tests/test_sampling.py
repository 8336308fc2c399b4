"""CFG combination, top-k / top-p filtering and inverse-CDF draws against hand-computed values."""

import math

import pytest
import torch

from lantern_demo.sampling import SamplingConfig, draw, filter_logits, guide, probs_from_logits


def test_guide_combines_rows():
    logits = torch.tensor([[[2.0, 0.0, 1.0]], [[1.0, 1.0, 1.0]]])  # [R=2, 1, V=3]
    # u + s (c - u) with s = 3: [1 + 3*1, 1 + 3*(-1), 1 + 0]
    assert torch.allclose(guide(logits, 3.0), torch.tensor([[4.0, -2.0, 1.0]]))
    assert torch.allclose(guide(logits[:1], 3.0), logits[0])


def test_top_k_and_top_p_by_hand():
    logits = torch.log(torch.tensor([0.1, 0.4, 0.2, 0.3]))
    kept = filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [False, True, False, True]
    # sorted masses 0.4, 0.3, 0.2, 0.1; top-p 0.65 needs 0.4 + 0.3 (mass before 0.2 is 0.7 >= 0.65)
    kept = filter_logits(logits, top_p=0.65).isfinite()
    assert kept.tolist() == [False, True, False, True]
    kept = filter_logits(logits, top_p=0.7000001).isfinite()
    assert kept.tolist() == [False, True, True, True]
    # top-p never drops the most likely token
    assert filter_logits(logits, top_p=0.01).isfinite().tolist() == [False, True, False, False]


def test_probs_from_logits_by_hand():
    c = torch.tensor([1.0, 2.0, 0.0])
    u = torch.tensor([0.0, 1.0, 0.0])
    cfg = SamplingConfig(cfg_scale=2.0, temperature=0.5, top_k=2)
    # guided = u + 2 (c - u) = [2, 3, 0]; / 0.5 = [4, 6, 0]; top-2 keeps [4, 6]
    p = probs_from_logits(torch.stack([c, u]), cfg)
    e = math.exp(2.0)
    assert torch.allclose(p, torch.tensor([1 / (1 + e), e / (1 + e), 0.0]), atol=1e-6)
    # greedy keeps temperature 1 for the masses
    g = probs_from_logits(torch.stack([c, u]), SamplingConfig(cfg_scale=2.0, temperature=0.0))
    assert torch.allclose(g, torch.softmax(torch.tensor([2.0, 3.0, 0.0]), 0))
    # cfg 1 uses a single row
    assert SamplingConfig(cfg_scale=1.0).rows == 1 and SamplingConfig(cfg_scale=3.0).rows == 2


def test_draw_inverse_cdf():
    p = torch.tensor([0.0, 0.25, 0.0, 0.75, 0.0])
    assert int(draw(p, torch.tensor(0.0))) == 1
    assert int(draw(p, torch.tensor(0.2499))) == 1
    assert int(draw(p, torch.tensor(0.25))) == 3
    assert int(draw(p, torch.tensor(0.99999))) == 3
    assert int(draw(p * 4, torch.tensor(0.5))) == 3  # unnormalised masses are fine


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-2), dict(top_p=0.0), dict(top_p=1.5), dict(cfg_scale=-1)])
def test_sampling_validation(bad):
    with pytest.raises(ValueError):
        SamplingConfig(**bad).validate()
