"""Tokenise with a VQ and train (or resume) a short class-conditional GPT: python gpt.py VQ_DIR RUN_DIR MINUTES STEPS DIM."""
import os
from pathlib import Path

CACHE = Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo"))  # the data and runs
import sys, time, json, numpy as np, torch
torch.set_num_threads(1)
from pathlib import Path
from lantern_demo.train import train_vq as TV, train_gpt as TG, train_drafter as TD
from lantern_demo.checkpoints import save_gpt, save_drafter
vqdir, out, minutes, steps, dim = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
out.mkdir(parents=True, exist_ok=True)
log = lambda s: print(s, flush=True)
z = np.load(CACHE / 'v3data.npz'); meta = json.load(open(CACHE / 'v3data.json'))
imgs, item, held = z['images'], z['item'], z['heldout']
M, V = imgs.shape[:2]
idsf = out / 'ids.pt'
if idsf.exists():
    ids = torch.load(idsf)
else:
    t = time.time()
    vq = TV.load_vq(vqdir)
    flat = imgs.reshape(-1, 64, 64, 3)
    ids = TV.encode_ids(vq, flat)
    bg = TV.background_patches(flat, ids.shape[1])
    code = TV.background_code(ids, bg)
    ids[bg] = code
    ids = ids.reshape(len(flat), -1)
    torch.save(ids, idsf)
    log(f'encoded {len(flat)} in {time.time()-t:.0f}s bg code {code} bg frac {bg.float().mean():.3f}')
row_class = np.repeat(item, V)
row_held = np.repeat(held, V)
train_idx = np.nonzero(~row_held)[0]; held_idx = np.nonzero(row_held)[0][::V]  # canonical held-out renditions
K = int(json.load(open(vqdir + '/config.json'))['num_vq_embeddings'])
ov = dict(dim=dim, n_head=dim // 32, ffn_hidden=int(dim * 8 / 3) // 16 * 16, prefix_rope='identity')
gpt, text, m = TG.train_gpt(ids, meta['captions'], train_idx, held_idx, vocab_size=K, steps=steps, batch=16, seed=0,
                            log=log, input_noise=0.05, condition='class', names=meta['names'], row_class=row_class, symbols=meta['emojis'],
                            config_overrides=ov, state_path=out / 'state.pt', resume=(out / 'state.pt').exists(),
                            time_limit=minutes * 60)
save_gpt(gpt, out / 'target'); text.save(out / 'text_encoder')
json.dump(m, open(out / 'gpt_metrics.json', 'w'), indent=1)
import shutil; shutil.copytree(vqdir, out / 'vq', dirs_exist_ok=True)
log('done')
