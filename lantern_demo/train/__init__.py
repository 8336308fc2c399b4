"""Training of the embedded default model (tiny text-to-emoji LlamaGen on OpenMoji): data, VQ, GPT, drafter."""
