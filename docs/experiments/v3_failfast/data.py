"""Render the styled emoji set once and save it where the other scripts read it: python data.py."""
import json
import os
from pathlib import Path

import numpy as np

from lantern_demo.train import emoji_data

CACHE = Path(os.environ.get("LANTERN_CACHE", Path.home() / ".cache" / "lantern-demo"))
ds, dropped = emoji_data.load_or_build_styled(CACHE / "train", variants=4)
np.savez(CACHE / "v3data.npz", images=ds.images, item=ds.item, style=ds.style, heldout=ds.heldout)
(CACHE / "v3data.json").write_text(json.dumps({"emojis": ds.emojis, "names": ds.names, "captions": ds.captions,
                                                "dropped": dropped}))
print(len(ds.emojis), "emojis,", len(ds.images), "renditions; dropped", dropped)
