"""Train a VQ with K codes on the styled renditions: python vq.py K STEPS OUT_DIR."""
import os
from pathlib import Path

CACHE = Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo"))  # the data and runs
import sys, time, json, numpy as np, torch
torch.set_num_threads(1)
from lantern_demo.train.train_vq import train_vq
K=int(sys.argv[1]); steps=int(sys.argv[2]); out=sys.argv[3]
z=np.load(CACHE / 'v3data.npz')
imgs, held = z['images'], z['heldout']
tr = imgs[~held].reshape(-1,64,64,3); he = imgs[held][:,0]
vq, m = train_vq(tr, he, out, steps=steps, batch=24, full_batch=12, crop_fraction=0.8, seed=0,
                 restart_every=100, config_overrides={'num_vq_embeddings':K}, log=lambda s: print(s, flush=True))
json.dump(m, open(out+'/metrics.json','w'), indent=1)
print(m)
