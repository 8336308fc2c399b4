"""Component sizes of the llamagen-t2i preset, on the meta device (no weights needed)."""

from lantern_demo.sizes import llamagen_sizes


def test_llamagen_sizes_match_the_release():
    s = llamagen_sizes()
    assert 770e6 < s["gpt_parameters"] < 780e6  # ~775M GPT-XL
    assert 71e6 < s["vq_parameters"] < 73e6  # ~72M VQ_16
    assert 44e6 < s["drafter_parameters"] < 46e6  # ~45M drafter (23.6M trained + 21M embedding)
    assert 1.1e9 < s["t5_encoder_parameters"] < 1.3e9  # flan-t5-xl encoder
    assert s["total_bytes"] < 6 * 1024**3  # fits a small GPU in bf16
