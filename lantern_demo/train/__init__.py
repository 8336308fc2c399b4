"""Training of the embedded default model (a tiny class-conditional LlamaGen drawing emojis in six styles): VQ, GPT, drafter, evaluation encoder, model card."""
