"""The benchmark (lantern_demo.bench): metrics, NLL recomputation, --quick schema, sharding.

The --quick run uses the embedded emoji preset when its weights are present,
else tiny-random (set LANTERN_BENCH_PRESET to force one). The sharded run
always uses tiny-random on the CPU with two processes.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lantern_demo.bench import metrics
from lantern_demo.bench.features import EvalEncoder, load as load_encoder, save as save_encoder
from lantern_demo.bench.paired import paired_ratio
from lantern_demo.pipeline import load_pipeline
from lantern_demo.sampling import SamplingConfig, probs_from_logits

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


# ----------------------------------------------------------------------------- metrics


def test_frechet_distance_and_precision_recall():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 4))
    x -= x.mean(0)
    assert abs(metrics.frechet_distance(x, x)) < 1e-8
    shift = np.array([1.0, 2.0, 0.0, 0.0])
    assert metrics.frechet_distance(x, x + shift) == pytest.approx(5.0, abs=1e-6)
    # scaled covariance: FD = Tr(S + 4S - 2*2S) = Tr(S) for S = cov(x)
    assert metrics.frechet_distance(x, 2 * x) == pytest.approx(np.trace(np.cov(x, rowvar=False)), rel=1e-6)
    assert metrics.precision_recall(x, x) == (1.0, 1.0)
    assert metrics.precision_recall(x, x + 100.0) == (0.0, 0.0)
    p, r = metrics.precision_recall(x, x[:, :] * 0.1)  # collapsed samples: precise, low recall
    assert p > 0.9 and r < 0.5
    assert np.isnan(metrics.frechet_distance(x[:1], x))


def test_retrieval_accuracy():
    t = np.eye(5)
    assert metrics.retrieval_accuracy(t, t) == 1.0
    assert metrics.retrieval_accuracy(t[[1, 0, 2, 3, 4]], t) == 0.6


def test_guided_nll_matches_cached_decoding_path():
    """forward_train with CFG rows gives the distributions the engine sampled from."""
    pipe = load_pipeline("tiny-random", "cpu")
    caption, _ = pipe.encode_prompt("a red cat")
    sampling = SamplingConfig(cfg_scale=3.0, temperature=0.9, top_k=50)
    tokens = torch.randint(0, pipe.target.vocab_size, (pipe.num_tokens,), generator=torch.Generator().manual_seed(0))
    p = metrics.guided_probs(pipe.target, caption, tokens, sampling)
    prefix = pipe.target.prefill(caption, 2, pipe.num_tokens + 1)
    step = [probs_from_logits(prefix.logits, sampling)]
    logits, _ = pipe.target.forward(tokens[:-1], torch.arange(pipe.num_tokens - 1))
    step += list(probs_from_logits(logits, sampling))
    torch.testing.assert_close(p, torch.stack(step), atol=2e-5, rtol=1e-4)
    out = metrics.sequence_nll(pipe.target, caption, tokens, sampling)
    picked = torch.stack(step).gather(-1, tokens[:, None]).squeeze(-1).double()
    assert out["out_of_support"] == float((picked == 0).sum())
    expected = -torch.log(picked.clamp_min(metrics.PROB_FLOOR)).mean()
    assert out["nll"] == pytest.approx(float(expected), rel=1e-4)


def test_eval_encoder_save_load_roundtrip(tmp_path):
    torch.manual_seed(0)
    enc = EvalEncoder(["red", "cat", "flag"], width=8).eval()
    save_encoder(enc, tmp_path, {"note": "test"})
    back = load_encoder(tmp_path)
    assert back.vocab == ["red", "cat", "flag"] and back.report == {"note": "test"}
    imgs = np.random.default_rng(0).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    a, b = enc.embed_images(imgs), back.embed_images(imgs)
    np.testing.assert_allclose(a, b, atol=0.05)  # float16 storage
    assert enc.embed_texts(["a red cat", "zzz"]).shape == (2, 64)
    assert load_encoder(tmp_path / "missing") is None


def test_committed_eval_encoder_loads():
    enc = load_encoder()
    if enc is None:
        pytest.skip("assets/eval not present")
    assert enc.report["heldout_retrieval_top1"] > 0.2  # well above chance (1/189)
    assert (ROOT / "assets" / "eval" / "eval_encoder.safetensors").stat().st_size < 5e6


# ----------------------------------------------------------------------------- --quick end to end


def _preset() -> str:
    if os.environ.get("LANTERN_BENCH_PRESET"):
        return os.environ["LANTERN_BENCH_PRESET"]
    from lantern_demo.bench.settings import default_preset

    return default_preset()


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_quick")
    # two prompts keep this at about a minute on 2 slow cores (the schema is the same for 4 or 16)
    cmd = [sys.executable, "-m", "lantern_demo.bench", "--quick", "--num-prompts", "2", "--preset", _preset(),
           "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text()), proc.stdout


def test_quick_schema(quick):
    out, res, stdout = quick
    assert res["schema"] == "lantern-bench v1"
    assert "| setting | NFE |" in stdout and (out / "results.md").exists()
    for png in ("tradeoff.png", "accepted_hist.png", "samples.png"):
        assert (out / png).stat().st_size > 1000
    names = [r["name"] for r in res["rows"]]
    assert names[0] == "ar" and any(n.startswith("sd") for n in names) and any(n.startswith("eagle") for n in names)
    assert any(r["method"] == "lantern" and r["params"]["delta"] == 0 for r in res["rows"])
    assert any(r["method"] == "lantern++" for r in res["rows"])
    sjd = [r for r in res["rows"] if r["method"] in ("sjd", "sjd+lantern")]
    assert [(r["method"], r["params"].get("coupled", False)) for r in sjd] == [
        ("sjd", False), ("sjd", True), ("sjd+lantern", True)]
    assert all(r["summary"]["drafter_passes"] == 0 and r["shape"] == "window" for r in sjd)
    n_prompts = len(res["meta"]["prompts"])
    assert n_prompts == 2 and res["meta"]["total_seconds"] > 0
    assert res["meta"]["repeats"] == 3
    walls = {r["name"]: [p["stats"]["wall_time"] for p in r["per_prompt"]] for r in res["rows"]}
    for r in res["rows"]:
        s = r["summary"]
        for key in ("nfe", "mean_accepted", "wall_time", "wall_time_p25", "wall_time_p75", "first_token_latency",
                    "e2e_time", "nll", "nll_se", "mean_tvd", "acceptance_rate", "tokens_per_pass_hist",
                    "target_time", "sample_time", "draft_time", "accept_time", "cache_time", "stream_time"):
            assert key in s, (r["name"], key)
        assert s["e2e_time"] >= s["wall_time"] > 0
        # every row is compared with every reference, and the entry is paired.paired_ratio of the per-prompt times
        assert sorted(r["paired"]) == ["ar", "eagle", "sd", "sjd"]
        ref_rows = {m: next(x for x in res["rows"] if x["method"] == m and not x["params"]) for m in r["paired"]}
        for m, e in r["paired"].items():
            ratio, ci = paired_ratio(walls[ref_rows[m]["name"]], walls[r["name"]], seed=res["meta"]["seed"])
            assert e == {"ratio": ratio, "ci95": list(ci)} and ci[0] <= ratio <= ci[1]
        for p in r["per_prompt"]:  # the prompt's times are those of its median repeat: the split adds up
            assert len(p["wall_times"]) == 3 and p["stats"]["wall_time"] == sorted(p["wall_times"])[1]
            parts = ("target_time", "sample_time", "draft_time", "accept_time", "cache_time")
            assert sum(p["stats"][k] for k in parts) <= p["stats"]["wall_time"]
            assert len(p["e2e_times"]) == 3 and p["e2e_time"] == sorted(p["e2e_times"])[1]
        if r["method"] == "ar":
            assert s["draft_time"] == s["accept_time"] == s["cache_time"] == 0.0
        assert s["nfe"] * s["mean_accepted"] == pytest.approx(res["meta"]["num_tokens"])
        assert len(r["per_prompt"]) == n_prompts
        assert [p["prompt_index"] for p in r["per_prompt"]] == list(range(n_prompts))
        assert [p["seed"] for p in r["per_prompt"]] == [res["meta"]["seed"] + i for i in range(n_prompts)]
        hist = {int(k): v for k, v in s["tokens_per_pass_hist"].items()}
        assert sum(hist.values()) == pytest.approx(n_prompts * (s["nfe"] - 1))
        if r["method"] in ("ar", "sd", "eagle", "sjd"):
            assert s["mean_tvd"] == 0.0
    ar = res["rows"][0]
    assert ar["summary"]["nfe"] == res["meta"]["num_tokens"] and ar["paired"]["ar"] == {"ratio": 1.0, "ci95": [1.0, 1.0]}
    assert "| target forward | sampling | drafting |" in stdout
    if load_encoder() is not None:
        assert all("retrieval_top1" in r["summary"] for r in res["rows"])
    else:
        assert any("eval encoder" in n for n in res["notes"])


def test_update_docs_replaces_only_its_sections(quick, tmp_path):
    from lantern_demo.bench.paired import phrase
    from lantern_demo.bench.report import DOCS_END, DOCS_START, HEADLINE_END, HEADLINE_START, update_docs

    out, res, _ = quick
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "benchmarks.md"
    doc.write_text(f"# Title\n\nintro\n\n{DOCS_START}\nOLD-SECTION-42\n{DOCS_END}\n\ntail\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"# Readme\n\n{HEADLINE_START}\nOLD-HEADLINE\n{HEADLINE_END}\n\nmore\n")
    update_docs(res, [readme, doc], out)
    update_docs(res, [readme, doc], out)  # idempotent
    text = doc.read_text()
    assert text.startswith("# Title\n\nintro\n") and text.endswith("\n\ntail\n") and "OLD-SECTION-42" not in text
    assert text.count(DOCS_START) == 1 and "| setting | NFE |" in text and "tradeoff.png" in text
    assert "| target forward | sampling | drafting |" in text and "x AR [95% CI]" in text
    assert "Closest to the paper's headline" in text
    assert "Drafter-free: **sjd+lantern coupled" in text and "ms acceptance" in text
    head = readme.read_text()
    assert head.startswith(f"# Readme\n\n{HEADLINE_START}\n") and head.endswith(f"{HEADLINE_END}\n\nmore\n")
    assert "OLD-HEADLINE" not in head and "(docs/benchmarks.md)" in head and DOCS_START not in head
    sjd = res["analysis"]["sjd_lantern_default"]
    assert phrase(sjd["paired"]["ar"], "AR") in head  # the prose quotes the paired entries, "level with" included
    entry = res["analysis"]["sjd_lantern_over_lantern_chain"]
    assert entry["ci95"][0] <= entry["ratio"] <= entry["ci95"][1]


def test_quick_delta_zero_matches_sd_quality(quick):
    """delta = 0 is the exact rule: same target distribution as sd, so the same quality within noise."""
    _, res, _ = quick
    rows = {r["name"]: r["summary"] for r in res["rows"]}
    sd = next(v for k, v in rows.items() if k.startswith("sd"))
    d0 = next(r["summary"] for r in res["rows"] if r["method"] == "lantern" and r["params"]["delta"] == 0)
    assert d0["mean_tvd"] == 0.0
    noise = 4 * (sd["nll_se"] ** 2 + d0["nll_se"] ** 2) ** 0.5 + 0.02 * abs(sd["nll"])
    assert abs(d0["nll"] - sd["nll"]) <= noise, (d0["nll"], sd["nll"], noise)
    if "fd" in sd and sd["fd_boot_std"] == sd["fd_boot_std"]:
        fd_noise = 4 * (sd["fd_boot_std"] ** 2 + d0["fd_boot_std"] ** 2) ** 0.5 + 0.1 * sd["fd"]
        assert abs(d0["fd"] - sd["fd"]) <= fd_noise
    assert d0["out_of_support"] == 0 and sd["out_of_support"] == 0


# ----------------------------------------------------------------------------- sharding


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _strip_timings(res: dict) -> dict:
    timing = set(res["timing_keys"])
    rows = []
    for r in res["rows"]:
        r = {k: v for k, v in r.items() if k not in timing}
        r["summary"] = {k: v for k, v in r["summary"].items() if k not in timing}
        r["per_prompt"] = [
            {**{k: v for k, v in p.items() if k not in timing},
             "stats": {k: v for k, v in p["stats"].items() if k not in timing}}
            for p in r["per_prompt"]
        ]
        rows.append(r)
    return {"rows": rows, "references": res["references"], "prompts": res["meta"]["prompts"]}


def test_emoji_prompt_splits():
    """--split picks captions of held-out or of training emojis, and reports their dataset indices."""
    from lantern_demo.bench.settings import prompt_set

    held, held_idx, ds, held_desc = prompt_set("emoji", 5, 0, None, None)
    train, train_idx, _, train_desc = prompt_set("emoji", 5, 0, None, None, split="train")
    assert len(held) == len(train) == 5 and "held-out" in held_desc and "training" in train_desc
    assert set(ds.split[held_idx]) == {1} and set(ds.split[train_idx]) == {0}
    assert train == [ds.captions[i][1] for i in train_idx]
    cur, cur_idx, cur_ds, cur_desc = prompt_set("emoji", 5, 0, None, None, curated=True)
    assert "held-out curated" in cur_desc and len(cur_ds) < len(ds) and set(cur_ds.split[cur_idx]) == {1}
    assert not any("skin tone" in p for p in cur) and cur == [cur_ds.captions[i][1] for i in cur_idx]


def test_sharded_run_equals_single_process(tmp_path):
    args = ["-m", "lantern_demo.bench", "--preset", "tiny-random", "--device", "cpu", "--num-prompts", "3",
            "--methods", "ar,sd,lantern", "--deltas", "0.2", "--ks", "8", "--no-plots"]
    single = subprocess.Popen([sys.executable, *args, "--out", str(tmp_path / "one")], cwd=ROOT, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", str(_free_port()), *args, "--out", str(tmp_path / "two")]
    two = subprocess.run(launch, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=170)
    out1, _ = single.communicate(timeout=170)
    assert single.returncode == 0, out1[-3000:]
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    a = json.loads((tmp_path / "one" / "results.json").read_text())
    b = json.loads((tmp_path / "two" / "results.json").read_text())
    assert a["meta"]["num_processes"] == 1 and b["meta"]["num_processes"] == 2
    assert _strip_timings(a) == _strip_timings(b)


def test_prefix_completion_cli(tmp_path, capsys):
    """python -m lantern_demo.bench.completion: the whole real prefix reproduces the decoded real tokens."""
    from lantern_demo.bench.completion import main as completion_main

    out = tmp_path / "completion.json"
    completion_main(["--num-prompts", "4", "--rows", "0,16", "--threads", "1", "--out", str(out)])
    res = json.loads(out.read_text())
    assert res["prompts"] == 4 and [r["prefix_rows"] for r in res["rows"]] == [0, 16]
    full = res["rows"][1]
    assert full["agreement_after_prefix"] == 1.0 and full["retrieval_hits"] == res["real_tokens_decoded"]
    assert 0 <= res["rows"][0]["retrieval_hits"] <= 4 and 0 <= res["real_images"] <= 4
    assert "| real images |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        completion_main(["--rows", "17"])
