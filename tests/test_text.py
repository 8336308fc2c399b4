"""Text encoders: left padding, zeroed pads, notices; tiny local T5 (no downloads)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from lantern_demo.text import (
    ClassTextEncoder,
    T5TextEncoder,
    TextEncoder,
    WordTextEncoder,
    build_vocab,
    clean_caption,
    left_align,
    load_text_encoder,
    split_words,
)

WORDS = "a photo of cat dog red blue the on small big house tree".split()


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

    d = tmp_path_factory.mktemp("tiny_t5")
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for w in WORDS:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(d)
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(vocab), d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                   pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    T5EncoderModel(cfg).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def t5(t5_dir):
    return T5TextEncoder.from_pretrained(t5_dir, max_length=12)


def test_clean_caption():
    assert clean_caption("A <b>Red</b> Cat  http://example.com/x.png ") == "a red cat"
    assert clean_caption("  photo of a dog @someone www.shop.net/item  ") == "photo of a dog"
    assert clean_caption('"a blue house"') == "a blue house"
    assert clean_caption("a cat &amp; a dog") == "a cat a dog"
    assert clean_caption("a house\u2014big") == "a house-big"
    assert clean_caption("") == ""


def test_left_align():
    emb = torch.arange(2 * 4 * 1, dtype=torch.float32).reshape(2, 4, 1) + 1
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    out, m = left_align(emb, mask)
    assert m.tolist() == [[False, False, True, True], [True] * 4]
    assert out[0, :, 0].tolist() == [0, 0, 1, 2]
    assert out[1, :, 0].tolist() == [5, 6, 7, 8]


def test_t5_left_padding_matches_unpadded_encoder(t5):
    assert isinstance(t5, TextEncoder) and t5.dim == 32
    prompts = ["a photo of a red cat", "Dog", ""]
    out = t5.encode(prompts)
    assert out.emb.shape == (3, 12, 32) and out.mask.shape == (3, 12) and out.mask.dtype == torch.bool
    for b, p in enumerate(prompts):
        n = out.notices[b].n_tokens
        text = clean_caption(p)
        ids = t5.tokenizer(text, return_tensors="pt")["input_ids"]
        assert ids.shape[1] == n  # words + </s>
        assert out.mask[b].tolist() == [False] * (12 - n) + [True] * n
        assert torch.count_nonzero(out.emb[b, : 12 - n]) == 0  # pads zeroed
        with torch.no_grad():
            want = t5.model(input_ids=ids).last_hidden_state[0]
        assert torch.allclose(out.emb[b, 12 - n:], want, atol=1e-5)
    assert out.notices[1].cleaned == "dog"
    assert out.notices[2].empty and out.notices[2].n_tokens == 1  # only </s>
    assert not out.notices[0].empty and not out.notices[0].truncated


def test_t5_notices_truncation_and_unknown(t5):
    long = " ".join(["big red house"] * 6)  # 18 words + </s>
    out = t5.encode([long, "a zebra on the qwerty tree"])
    n0 = out.notices[0]
    assert n0.truncated and n0.n_tokens == 12 and out.mask[0].all()
    assert any("cut" in m for m in n0.messages())
    n1 = out.notices[1]
    assert n1.unknown_words == ["zebra", "qwerty"] and not n1.truncated
    # batch composition does not change a row
    alone = t5.encode(["a zebra on the qwerty tree"])
    assert torch.allclose(alone.emb[0], out.emb[1], atol=1e-5)


def test_split_words_and_build_vocab():
    assert split_words("Grinning Face: with Big-Eyes! #1 café") == ["grinning", "face", "with", "big", "eyes", "1", "café"]
    caps = ["red apple", "green apple", "Apple pie", "red car"]
    assert build_vocab(caps) == ["apple", "red", "car", "green", "pie"]
    assert build_vocab(caps, min_count=2) == ["apple", "red"]
    assert build_vocab(caps, max_size=1) == ["apple"]


def test_word_encoder_padding_notices_and_grad():
    enc = WordTextEncoder(["red", "apple", "car", "green"], dim=8, max_length=4)
    assert isinstance(enc, TextEncoder) and isinstance(enc, torch.nn.Module)
    out = enc.encode(["Red apple!", "a purple car", "zebra", "red red green apple car"])
    assert out.emb.shape == (4, 4, 8)
    assert out.mask.tolist() == [
        [False, False, True, True],
        [False, False, False, True],
        [False] * 4,
        [True] * 4,
    ]
    assert torch.count_nonzero(out.emb[~out.mask]) == 0
    assert torch.equal(out.emb[0, 2], enc.embedding.weight[1]) and torch.equal(out.emb[0, 3], enc.embedding.weight[2])
    n = out.notices
    assert n[1].unknown_words == ["a", "purple"] and n[1].n_tokens == 1 and not n[1].empty
    assert n[2].empty and n[2].unknown_words == ["zebra"] and n[2].n_tokens == 0 and n[2].messages()
    assert n[3].truncated and n[3].cleaned == "red red green apple"
    out.emb.sum().backward()  # trainable jointly with the GPT
    assert enc.embedding.weight.grad is not None and enc.embedding.weight.grad[0].abs().sum() == 0


def test_word_encoder_save_load(tmp_path):
    enc = WordTextEncoder(build_vocab(["red apple", "green car"]), dim=6, max_length=5)
    enc.save(tmp_path / "te")
    assert (tmp_path / "te" / "text_encoder.safetensors").exists() and (tmp_path / "te" / "vocab.json").exists()
    back = WordTextEncoder.load(tmp_path / "te")
    assert back.vocab == enc.vocab and back.max_length == 5 and back.dim == 6
    a, b = enc.encode(["green apple"]), back.encode(["green apple"])
    assert torch.equal(a.emb, b.emb) and torch.equal(a.mask, b.mask)


NAMES = [["red apple", "apple"], ["green apple"], ["red car", "automobile"], ["dog face"], ["dog"]]


def test_class_encoder_matches_prompts_by_their_words():
    enc = ClassTextEncoder(NAMES, dim=8, stop_words=("a", "an", "emoji", "of"))
    assert isinstance(enc, TextEncoder) and enc.max_length == 1
    ids, mask, n = enc.tokenize(["an emoji of red apple", "apple", "a green apple", "automobile", "dog",
                                 "red", "dog face with a hat", "zebra", "", "an emoji"])
    # class id + 1 per prompt: exact names, an alias, "red" (shared by two names: the tie goes
    # to the lower class), a name plus unknown words, and three prompts with no content word
    assert ids[:, 0].tolist() == [1, 1, 2, 3, 5, 1, 4, 0, 0, 0]
    assert mask[:, 0].tolist() == [True] * 7 + [False] * 3
    assert [x.matched for x in n[:5]] == [None] * 5  # said word for word: nothing to report
    assert n[5].matched == "red apple" and any("red apple" in m for m in n[5].messages())
    assert n[6].unknown_words == ["with", "hat"] and n[6].matched is None  # the known words name it exactly
    assert n[7].empty and n[7].unknown_words == ["zebra"] and n[7].messages()
    assert n[8].empty and n[9].empty and n[9].unknown_words == []
    # the rarer word decides: "red" is in two names, "car" in one
    assert enc.match("car red")[0] == 2 and enc.match("apple red")[0] == 0


def test_class_encoder_embedding_and_save_load(tmp_path):
    enc = ClassTextEncoder(NAMES, dim=6, stop_words=("an",))
    out = enc.encode(["red car", "zebra"])
    assert out.emb.shape == (2, 1, 6) and out.mask.tolist() == [[True], [False]]
    assert torch.equal(out.emb[0, 0], enc.embedding.weight[3]) and torch.count_nonzero(out.emb[1]) == 0
    out.emb.sum().backward()
    assert enc.embedding.weight.grad[0].abs().sum() == 0 and enc.embedding.weight.grad[3].abs().sum() > 0
    enc.save(tmp_path / "te")
    back = load_text_encoder(tmp_path / "te")
    assert isinstance(back, ClassTextEncoder) and back.names == enc.names and back.stop_words == ["an"]
    assert torch.equal(back.encode(["red car"]).emb, enc.encode(["red car"]).emb)
    with pytest.raises(ValueError, match="not a WordTextEncoder"):
        WordTextEncoder.load(tmp_path / "te")
    WordTextEncoder(["red"], dim=2).save(tmp_path / "we")
    assert isinstance(load_text_encoder(tmp_path / "we"), WordTextEncoder)
    with pytest.raises(ValueError, match="every class needs"):
        ClassTextEncoder([["a"], []])
