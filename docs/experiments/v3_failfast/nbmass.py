"""Where the target's uncertainty lies (mass inside the sampled code's k neighbours): python nbmass.py STATE VQ_DIR N_PROMPTS BACKGROUND_CODE."""
import os
from pathlib import Path

CACHE = Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo"))  # the data and runs
import sys, json, numpy as np, torch
torch.set_num_threads(1)
from pathlib import Path
from lantern_demo.train.train_gpt import make_class_encoder, gpt_config
from lantern_demo.train.card import caption_of
from lantern_demo.gpt import GPT
from lantern_demo.vq import VQDecoder
from lantern_demo.engine import DecodeConfig, generate
from lantern_demo.sampling import SamplingConfig, probs_from_logits
from lantern_demo.neighbors import build_neighbor_table
state, vqdir, n_prompts, bg = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
st = torch.load(state, weights_only=True)
meta = json.load(open(CACHE / 'v3data.json'))
text = make_class_encoder(meta['names'], np.arange(len(meta['names'])), symbols=meta['emojis'])
V = int(json.load(open(vqdir + '/config.json'))['num_vq_embeddings'])
gpt = GPT(gpt_config(V, text.dim, **dict(st['settings']['overrides'])))
gpt.load_state_dict(st['modules'][0]); text.load_state_dict(st['modules'][1]); gpt.eval(); text.eval()
vq = VQDecoder.from_pretrained(Path(vqdir), 16)
nb = build_neighbor_table(vq.raw_codebook(), 1024)
samp = SamplingConfig(cfg_scale=2.0, temperature=1.0, top_k=64)
rng = np.random.default_rng(7)
prompts = [meta['names'][i][0] for i in rng.choice(len(meta['names']), n_prompts, replace=False)]
res = {k: [] for k in (16, 128, 512, 1024)}; rest = []
for j, p in enumerate(prompts):
    c = caption_of(text, p)
    r = generate(gpt, None, c, DecodeConfig(method='ar', sampling=samp), 256, seed=j)
    with torch.no_grad():
        pre = gpt.prefill(c, samp.rows, 256); lg, _ = gpt.forward(r.tokens[:-1], torch.arange(255))
        pr = probs_from_logits(torch.cat([pre.logits[:, None], lg], 1), samp)
    for i, x in enumerate(r.tokens.tolist()):
        if x == bg: continue
        other = 1 - pr[i, x].item(); rest.append(other)
        for k in res: res[k].append(pr[i, nb[x, :k]].sum().item())
out = {'positions': len(rest), 'mass_not_on_sampled': round(float(np.mean(rest)), 3)}
for k, v in res.items(): out[f'mass_in_k{k}'] = round(float(np.mean(v)), 3); out[f'share_of_rest_k{k}'] = round(float(np.sum(v) / max(1e-9, np.sum(rest))), 3)
print(json.dumps(out))
