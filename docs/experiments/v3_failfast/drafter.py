"""Train the drafter on data plus the target's own samples: python drafter.py RUN_DIR STEPS N_SELF_SAMPLES."""
import os
from pathlib import Path

CACHE = Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo"))  # the data and runs
import sys, json, shutil, numpy as np, torch
torch.set_num_threads(1)
from pathlib import Path
from lantern_demo.train import train_drafter as TD
from lantern_demo.train.train_gpt import ClassBank
from lantern_demo.checkpoints import load_gpt, save_drafter
from lantern_demo.text import load_text_encoder
out, steps, n_self = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
log = lambda s: print(s, flush=True)
z = np.load(CACHE / 'v3data.npz'); item, held = z['item'], z['heldout']; V = z['images'].shape[1]
ids = torch.load(out / 'ids.pt')
row_class = np.repeat(item, V); row_held = np.repeat(held, V)
train_idx = np.nonzero(~row_held)[0]; held_idx = np.nonzero(row_held)[0][::V]
gpt = load_gpt(out / 'target'); text = load_text_encoder(out / 'text_encoder')
bank = ClassBank.of_classes(row_class)
samples = TD.draw_self_samples(gpt, text, bank, train_idx, n_self, 0, log) if n_self else None
dr, dm = TD.train_drafter(gpt, text, ids, bank, train_idx, held_idx, steps=steps, batch=16, seed=0, log=log, self_samples=samples)
save_drafter(dr, out / 'drafter'); json.dump(dm, open(out / 'drafter_metrics.json', 'w'), indent=1)
if not (out / "vq").exists(): shutil.copytree(CACHE / "ff" / "vq4096", out / "vq")
log('done')
