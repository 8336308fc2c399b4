"""Batched target sampling (the drafter's self-distillation data) against the engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lantern_demo.bench_engine import tiny_random_pair
from lantern_demo.engine import generate
from lantern_demo.methods import DecodeConfig
from lantern_demo.gpt import Caption
from lantern_demo.sampling import SamplingConfig, probs_from_logits
from lantern_demo.train.self_samples import sample_batch


@pytest.fixture(scope="module")
def target_and_captions():
    target, _, _ = tiny_random_pair(seed=3, vocab=64, dim=32, n_layer=2, grid=4)
    g = torch.Generator().manual_seed(0)
    P, C = target.cfg.cls_token_num, target.cfg.caption_dim
    emb = torch.randn(3, P, C, generator=g)
    mask = torch.ones(3, P, dtype=torch.bool)
    mask[1, :3] = False  # left padding, as the word encoder makes it
    mask[2, :6] = False
    return target.eval(), emb, mask


@pytest.mark.parametrize("cfg_scale", [1.0, 2.5])
def test_greedy_batch_equals_engine_ar(target_and_captions, cfg_scale):
    target, emb, mask = target_and_captions
    sampling = SamplingConfig(cfg_scale=cfg_scale, temperature=0.0)
    batch = sample_batch(target, emb, mask, sampling, torch.Generator().manual_seed(0))
    n = target.cfg.grid**2
    assert batch.shape == (3, n)
    for i in range(3):
        ar = generate(target, None, Caption(emb[i], mask[i]), DecodeConfig("ar", sampling=sampling), n, seed=0)
        assert batch[i].tolist() == ar.tokens.tolist(), i


def test_first_token_follows_the_guided_distribution(target_and_captions):
    """Many copies of one caption: the first token's frequencies match the engine's p0 (chi-square)."""
    target, emb, mask = target_and_captions
    sampling = SamplingConfig(cfg_scale=2.0, temperature=1.0, top_k=8)
    m = 3000
    first = sample_batch(target, emb[1:2].expand(m, -1, -1), mask[1:2].expand(m, -1), sampling,
                         torch.Generator().manual_seed(1), num_tokens=1)[:, 0]
    p0 = probs_from_logits(target.prefill(Caption(emb[1], mask[1]), 2, 4).logits, sampling)
    counts = torch.bincount(first, minlength=p0.numel()).double()
    support = p0 > 0
    assert counts[~support].sum() == 0  # nothing outside the top-k
    expected = m * p0[support].double()
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    # 8 cells -> 7 degrees of freedom; P(chi2 > 24.3) = 0.001
    assert chi2 < 24.3, chi2


def test_drafter_trains_on_self_samples(target_and_captions):
    """The self-distillation option: samples of the target go into the drafter's batches."""
    from lantern_demo.train.train_drafter import draw_self_samples, train_drafter
    from lantern_demo.train.train_gpt import CaptionBank, make_text_encoder

    target, _, _ = target_and_captions
    captions = [["a red heart", "heart"], ["a cat face"], ["flag of japan", "japan"]]
    text = make_text_encoder([c for caps in captions for c in caps], dim=target.cfg.caption_dim,
                             max_length=target.cfg.cls_token_num)
    train_idx = np.array([0, 1, 2])
    bank = CaptionBank(text, captions)
    samples = draw_self_samples(target, text, bank, train_idx, 5, seed=0, log=lambda m: None)
    ids, cap_ids, cap_mask = samples
    assert ids.shape == (5, target.cfg.grid**2) and cap_ids.shape == cap_mask.shape == (5, target.cfg.cls_token_num)
    assert int(ids.max()) < target.cfg.vocab_size and bool(cap_mask.any(1).all())
    data = torch.randint(0, target.cfg.vocab_size, (3, target.cfg.grid**2), generator=torch.Generator().manual_seed(0))
    drafter, m = train_drafter(target, text, data, bank, train_idx, np.array([], dtype=np.int64), steps=2,
                               batch=4, log=lambda s: None, self_samples=samples)
    assert "5 samples of the target" in m["method"]
    assert drafter.fc.weight.abs().sum() > 0



def test_prefix_completion_follows_the_teacher_forced_argmax():
    """A forced prefix is kept, and greedy continuation is the guided argmax given all earlier
    tokens (on the trained emoji model, where token positions matter: a shifted or misread
    prefix changes the continuation)."""
    from lantern_demo.bench.metrics import guided_probs
    from lantern_demo.pipeline import load_pipeline

    pipe = load_pipeline("emoji", device="cpu")
    target, text = pipe.target, pipe.text_encoder
    ids, mask, _ = text.tokenize(["red heart", "cat face"])
    emb = text(ids)
    sampling = SamplingConfig(cfg_scale=2.0, temperature=0.0)
    n, n0 = target.cfg.grid**2, 3 * target.cfg.grid
    prefix = torch.randint(0, target.cfg.vocab_size, (2, n0), generator=torch.Generator().manual_seed(4))
    out = sample_batch(target, emb, mask, sampling, torch.Generator().manual_seed(0), prefix=prefix)
    assert out.shape == (2, n) and torch.equal(out[:, :n0], prefix)
    for i in range(2):
        probs = guided_probs(target, Caption(emb[i], mask[i]), out[i], sampling)[n0:]  # [N - n0, V]
        chosen = probs.gather(1, out[i, n0:, None])[:, 0]
        assert bool((chosen >= probs.max(1).values - 1e-5).all()), i  # argmax up to float ties
    full = sample_batch(target, emb, mask, sampling, torch.Generator().manual_seed(0), prefix=out)
    assert torch.equal(full, out)
    with pytest.raises(ValueError):
        sample_batch(target, emb, mask, sampling, torch.Generator(), prefix=prefix[:1])
