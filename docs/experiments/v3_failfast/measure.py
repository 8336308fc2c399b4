"""Top-1 while sampling, tokens per target pass of exact vs relaxed methods, sample grids: python measure.py RUN_DIR N_PROMPTS K_LIST DELTA_LIST."""
import os
from pathlib import Path

CACHE = Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo"))  # the data and runs
import sys, json, time, numpy as np, torch
torch.set_num_threads(1)
from pathlib import Path
from PIL import Image
from lantern_demo.train.card import load_all, caption_of as _cond
from lantern_demo.engine import DecodeConfig, generate
from lantern_demo.sampling import SamplingConfig, probs_from_logits
from lantern_demo.neighbors import build_neighbor_table
out = Path(sys.argv[1]); n_prompts = int(sys.argv[2]); KS = tuple(int(x) for x in sys.argv[3].split(',')); DS = tuple(float(x) for x in sys.argv[4].split(','))
text, gpt, drafter, vq = load_all(out)
meta = json.load(open(CACHE / 'v3data.json'))
rng = np.random.default_rng(7)
prompts = [meta['names'][i][0] for i in rng.choice(len(meta['names']), n_prompts, replace=False)]
samp = SamplingConfig(cfg_scale=2.0, temperature=1.0, top_k=64)
n = gpt.cfg.grid ** 2
ids = torch.load(out / 'ids.pt'); bg = int(torch.bincount(ids.flatten()).argmax())
top_all, top_fg = [], []
for j, p in enumerate(prompts):
    cond = _cond(text, p)
    r = generate(gpt, None, cond, DecodeConfig(method='ar', sampling=samp), n, seed=j)
    with torch.no_grad():
        pre = gpt.prefill(cond, samp.rows, n)
        lg, _ = gpt.forward(r.tokens[:-1], torch.arange(n - 1))
        pr = probs_from_logits(torch.cat([pre.logits[:, None], lg], 1), samp)
    m = pr.max(-1).values.flatten().numpy()
    top_all += list(m); top_fg += list(m[r.tokens.numpy() != bg])
print(json.dumps({'prompts': n_prompts, 'mean_top1_all': float(np.mean(top_all)), 'mean_top1_nonbg': float(np.mean(top_fg)),
                  'nonbg_share': len(top_fg) / len(top_all), 'hist_all': np.histogram(top_all, bins=10, range=(0, 1))[0].tolist(),
                  'hist_nonbg': np.histogram(top_fg, bins=10, range=(0, 1))[0].tolist()}), flush=True)
nb = build_neighbor_table(vq.raw_codebook(), max(KS))
S = [('ar', dict(method='ar'))]
for c in (0.5, 0.0):
    S.append((f'sd c{c}', dict(method='sd', draft='chain', gamma=8, min_confidence=c)))
    for k in KS:
        for d in DS:
            S.append((f'lantern c{c} d{d} k{k}', dict(method='lantern', draft='chain', gamma=8, min_confidence=c, delta=d, k=k)))
S.append(('sjd coupled', dict(method='sjd', window=16, init='vertical', coupled=True)))
for k in KS:
    for d in DS:
        S.append((f'sjd+lantern d{d} k{k}', dict(method='sjd+lantern', window=16, init='vertical', coupled=True, delta=d, k=k)))
res = {}
for name, kw in S:
    st = [generate(gpt, drafter, _cond(text, p), DecodeConfig(sampling=samp, **kw), n, seed=j, neighbors=nb, row_length=gpt.cfg.grid).stats for j, p in enumerate(prompts)]
    res[name] = st
    print(json.dumps({'setting': name, 'tokens_per_pass': float(np.mean([s['mean_accepted'] for s in st])),
                      'nfe': float(np.mean([s['nfe'] for s in st])), 'accept_rate': float(np.mean([s['acceptance_rate'] for s in st])),
                      'tvd': float(np.mean([s['mean_tvd'] for s in st])), 'wall': float(np.mean([s['wall_time'] for s in st]))}), flush=True)
# sample grid: the 8 required prompts x 4 seeds, AR and SJD+LANTERN d0.4 k512
req = ['grinning face', 'red heart', 'rocket', 'cat face', 'sun', 'pizza', 'smiling face with sunglasses', 'deciduous tree']
for tag, kw in (('ar', dict(method='ar')), ('sjdl', dict(method='sjd+lantern', window=16, init='vertical', coupled=True, delta=0.4, k=KS[-1]))):
    rows = []
    for p in req:
        ims = []
        for s in range(4):
            r = generate(gpt, drafter, _cond(text, p), DecodeConfig(sampling=samp, **kw), n, seed=s, neighbors=nb, row_length=gpt.cfg.grid)
            ims.append(vq.decode(r.tokens[None])[0].numpy())
        rows.append(np.concatenate(ims, 1))
    Image.fromarray(np.concatenate(rows, 0)).resize((4 * 128, 8 * 128), Image.NEAREST).save(out / f'grid_{tag}.png')
print('grid done', flush=True)
