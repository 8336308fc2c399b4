"""lantern-demo: LANTERN relaxed speculative decoding for visual AR text-to-image models."""

__version__ = "0.1.0"
