"""``python -m lantern_demo.bench`` (also under ``accelerate launch -m lantern_demo.bench``)."""

from .run import main

main()
