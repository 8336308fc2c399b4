"""What people type, as the class encoder reads it: emoji characters, typos, other scripts."""

from pathlib import Path

import pytest

from lantern_demo.prompt_reading import close_names, is_non_latin, spell_emoji
from lantern_demo.text import ClassTextEncoder, load_text_encoder

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "emoji"
NAMES = [["slightly smiling face"], ["cat face", "cat"], ["red heart", "heart"], ["pizza"], ["sun"],
         ["sun behind large cloud"]]


def test_spell_emoji_uses_english_names():
    assert spell_emoji("🙂") == "slightly smiling face"
    assert spell_emoji("❤️🐱") == "red heart cat face"
    assert spell_emoji("a 🍕 please") == "a pizza please"
    assert spell_emoji("no emoji here") == "no emoji here"


def test_non_latin_detection():
    assert is_non_latin("猫") and is_non_latin("日本の旗") and is_non_latin("кот")
    assert not is_non_latin("café") and not is_non_latin("cat 猫") and not is_non_latin("123 🙂")


def test_close_names_ranks_typos_and_refuses_unrelated_words():
    names = ["pig", "pizza", "pie", "cat face"]
    assert close_names(["pizzza"], names) == ["pizza"]
    assert close_names(["catt"], names)[0] == "cat face"
    assert close_names(["xylophone"], names) == []
    assert close_names([], names) == []


def test_emoji_characters_pick_their_class_and_say_how_they_were_read():
    enc = ClassTextEncoder(NAMES)
    ids, mask, notices = enc.tokenize(["🙂", "🍕", "pizza"])
    assert ids[:, 0].tolist() == [1, 4, 4] and mask.all()
    assert notices[0].read_as == "slightly smiling face" and notices[0].matched is None
    assert any("slightly smiling face" in m for m in notices[0].messages())
    assert notices[2].read_as is None and notices[2].messages() == []


def test_unknown_prompts_get_suggestions_or_the_english_names_message():
    enc = ClassTextEncoder(NAMES)
    _, mask, (typo, foreign) = enc.tokenize(["pizzza", "猫"])
    assert not mask.any()
    assert typo.empty and typo.suggestions == ["pizza"] and not typo.non_latin
    assert any("pizza" in m and "mean" in m for m in typo.messages())
    assert foreign.empty and foreign.non_latin and foreign.suggestions == []
    assert any("English" in m for m in foreign.messages())


@pytest.mark.skipif(not (ASSETS / "text_encoder").exists(), reason="no shipped embedded model")
def test_every_example_prompt_is_read_as_the_emoji_it_names():
    from lantern_demo.ui import EXAMPLES

    enc = load_text_encoder(ASSETS / "text_encoder")
    _, mask, notices = enc.tokenize(list(EXAMPLES))
    for prompt, known, notice in zip(EXAMPLES, mask[:, 0].tolist(), notices):
        assert known and notice.matched is None and not notice.unknown_words, (prompt, notice.messages())


def test_the_word_encoder_reads_emoji_too_and_reports_structured_fields():
    from lantern_demo.text import WordTextEncoder

    enc = WordTextEncoder(["red", "green", "heart"])
    _, mask, (rocket, heart, typo) = enc.tokenize(["🚀", "❤️", "gren"])
    assert rocket.reading() == {"read_as": "rocket", "understood_as": None, "matched": None, "nothing_matched": True,
                                "suggestions": [], "non_latin": False, "unknown_words": ["rocket"],
                                "truncated": False}
    assert heart.reading()["understood_as"] == "red heart" and mask[1].any()
    assert typo.reading()["suggestions"] == ["green"]
