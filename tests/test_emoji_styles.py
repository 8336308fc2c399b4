"""Multi-style emoji data: style sources, normalised renditions, rendition classes, emoji characters in prompts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lantern_demo.emoji import styles as emoji_styles

pytest.importorskip("resvg_py")

SQUARE = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">'
          '<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="#ff0000"/></svg>')


def _ink_box(img: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero((img < 200).any(-1))
    return xs.min(), xs.max() + 1, ys.min(), ys.max() + 1


def test_key_of_drops_variation_selectors():
    assert emoji_styles.key_of("\u2764\ufe0f") == emoji_styles.key_of("\u2764") == "2764"
    assert emoji_styles.key_of("\U0001F9D1\u200D\U0001F3A8") == "1f9d1-200d-1f3a8"


@pytest.mark.parametrize("x,y,w,h", [(10, 10, 20, 20), (40, 5, 50, 90), (0, 0, 100, 100)])
def test_normalise_fills_the_frame_to_a_fixed_margin_whatever_the_drawing_size(x, y, w, h):
    img = emoji_styles.normalise(emoji_styles.rasterise(SQUARE.format(x=x, y=y, w=w, h=h)), size=64, margin=4)
    assert img.shape == (64, 64, 3) and img.dtype == np.uint8
    assert (img[0, 0] == 255).all()  # white background
    x0, x1, y0, y1 = _ink_box(img)
    assert max(x1 - x0, y1 - y0) in (56, 57)  # longer side spans size - 2 * margin
    assert abs((x0 + x1) / 2 - 32) <= 1 and abs((y0 + y1) / 2 - 32) <= 1  # centred


def test_normalise_scale_and_shift_move_the_content():
    rgba = emoji_styles.rasterise(SQUARE.format(x=20, y=20, w=60, h=60))
    base = _ink_box(emoji_styles.normalise(rgba))
    moved = _ink_box(emoji_styles.normalise(rgba, shift=(3.0, -2.0)))
    assert (moved[0] - base[0], moved[2] - base[2]) == (3, -2)
    small = _ink_box(emoji_styles.normalise(rgba, scale=0.5))
    assert abs((small[1] - small[0]) - 28) <= 1


def test_normalise_of_an_empty_drawing_is_none():
    empty = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"></svg>'
    assert emoji_styles.normalise(emoji_styles.rasterise(empty)) is None


def test_iconify_pack_maps_by_chars_and_by_name(tmp_path):
    pack = {"width": 32, "height": 32, "icons": {"grinning-face": {"body": "<path d='M0 0h32v32H0z'/>"},
                                                 "rocket": {"body": "<path d='M0 0h8v8H0z'/>", "width": 16}},
            "aliases": {"rocket-ship": {"parent": "rocket"}}}
    (tmp_path / "icons.json").write_text(json.dumps(pack))
    by_name = emoji_styles.iconify_svgs(tmp_path, {"grinning-face": "1f600", "rocket-ship": "1f680"})
    assert set(by_name) == {"1f600", "1f680"}
    assert 'viewBox="0 0 16 32"' in by_name["1f680"]
    (tmp_path / "chars.json").write_text(json.dumps({"1f680-fe0f": "rocket-ship"}))
    assert set(emoji_styles.iconify_svgs(tmp_path, {})) == {"1f680"}


def test_every_style_is_pinned_and_openly_licensed():
    assert len(emoji_styles.STYLES) >= 5
    for s in emoji_styles.STYLES:
        assert s.version.count(".") == 2 and s.registry in ("npm", "pypi")
        assert s.licence in ("CC-BY-4.0", "CC-BY-SA-4.0", "Apache-2.0", "MIT")
        assert s.title in emoji_styles.attribution() and s.licence in emoji_styles.attribution()


def test_class_bank_of_classes_gives_every_rendition_its_emojis_class():
    from lantern_demo.train.train_gpt import ClassBank

    bank = ClassBank.of_classes(np.array([0, 0, 1, 2, 2]))
    ids, mask = bank.first(torch.tensor([4, 0, 2]))
    assert ids.flatten().tolist() == [3, 1, 2] and mask.all()


def test_class_text_encoder_reads_emoji_characters_first():
    from lantern_demo.text import ClassTextEncoder

    enc = ClassTextEncoder([["red heart", "heart"], ["heart on fire"], ["rocket"]], dim=4,
                           symbols=["\u2764\ufe0f", "\u2764\ufe0f\u200d\U0001F525", "\U0001F680"])
    assert enc.match("\U0001F680")[0] == 2
    assert enc.match("draw \u2764 please")[0] == 0  # without the variation selector
    assert enc.match("\u2764\ufe0f\u200d\U0001F525")[0] == 1  # the longest symbol wins
    assert enc.match("rocket")[0] == 2 and enc.match("heart")[0] == 0
    again = ClassTextEncoder.from_meta(enc._meta())
    assert again.match("\U0001F680")[0] == 2
    with pytest.raises(ValueError, match="symbols"):
        ClassTextEncoder([["a"], ["b"]], symbols=["x"])


def test_quantise_l2_picks_the_codes_diffusers_lookup_picks_once_the_codebook_is_saved_normalised():
    from lantern_demo.train.train_vq import make_vq, quantise_l2

    torch.manual_seed(0)
    vq = make_vq(num_vq_embeddings=64)
    z = torch.randn(2, 8, 4, 4) * 3
    raw = torch.randn(64, 8) * 5
    q, loss, ids = quantise_l2(z, raw)
    vq.quantize.embedding.weight.data.copy_(torch.nn.functional.normalize(raw, dim=-1))
    q2, _, (_, _, ids2) = vq.quantize(z)
    assert torch.equal(ids, ids2.flatten())
    assert torch.allclose(q, q2, atol=1e-6)
    assert torch.allclose(q.norm(dim=1), torch.ones(2, 4, 4), atol=1e-5) and loss.item() > 0


def test_smoke_styled_dataset_needs_no_registry_and_is_seeded(tmp_path):
    from lantern_demo.emoji import data as emoji_data

    a, dropped = emoji_data.load_or_build_styled(tmp_path, smoke=True, log=lambda m: None)
    b, _ = emoji_data.build_styled(emoji_data.Sources.smoke(), budget=len(emoji_data.REQUIRED), log=lambda m: None)
    assert sorted(a.emojis) == sorted(emoji_data.REQUIRED)
    m = len(emoji_data.REQUIRED) * len(emoji_styles.STYLES)
    assert a.images.shape == (m, 4, 64, 64, 3) and (a.images == b.images).all()
    assert sorted(set(a.style.tolist())) == list(range(len(emoji_styles.STYLES)))
    assert (np.bincount(a.item) == len(emoji_styles.STYLES)).all()
    assert 1 <= a.heldout.sum() < m and dropped["styles"] == 0
    assert not (a.images[:, 0] == a.images[:, 1]).all()  # variants differ from the canonical rendition


def test_eval_encoder_training_set_holds_one_style_out(tmp_path):
    from lantern_demo.emoji import features
    from lantern_demo.emoji import data as emoji_data

    data = features.styled_set(tmp_path, "noto", smoke=True)
    ds, _ = emoji_data.load_or_build_styled(tmp_path, smoke=True)
    n_styles, n_emojis = len(emoji_styles.STYLES), len(emoji_data.REQUIRED)
    assert len(data.check_texts) == n_emojis and len(data.images) == (n_styles - 1) * n_emojis * 4
    noto = ds.images[ds.style == emoji_styles.STYLE_NAMES.index("noto"), 0]
    assert (data.check_images == noto).all()
    assert not any((data.images == im).all((1, 2, 3)).any() for im in noto)
    with pytest.raises(ValueError, match="held_style"):
        features.styled_set(tmp_path, "apple", smoke=True)
    model, report = features.train(data, tmp_path / "enc", epochs=1, batch=16, log=lambda m: None)
    assert report["retrieval_ways"] == n_emojis and "noto held out" in report["data"]


def test_smoke_sources_keep_only_the_required_emojis_in_every_style(tmp_path):
    from lantern_demo.emoji import data as emoji_data

    extra = emoji_data.Sources.smoke()
    extra.svgs["noto"]["1f436"] = "<svg/>"  # a dog: not required, so not written
    extra.save_smoke(tmp_path / "s.json.gz")
    again = emoji_data.Sources.smoke(tmp_path / "s.json.gz")
    keys = {emoji_styles.key_of(r) for r in emoji_data.REQUIRED}
    assert set(again.svgs) == set(emoji_styles.STYLE_NAMES)
    assert all(set(d) == keys for d in again.svgs.values()) and set(again.groups) == keys
    assert again.svgs == emoji_data.Sources.smoke().svgs
