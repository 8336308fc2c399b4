"""Speed/quality benchmark of the decoding methods.

``python -m lantern_demo.bench [--preset P] [--quick]`` runs ar, sd, eagle,
lantern over a grid of (delta, k) on its default tree and lantern++ over lambda,
on the same prompts and seeds, and reports per setting:

- speed (from ``steps.summarize``, never recomputed): NFE, mean accepted length
  (tokens per target pass), engine wall time per image (median and quartiles
  over prompts, prefill to last token: no text encoding, no VQ decoding),
  first-token latency, end-to-end time of the pipeline call, and speed-ups vs
  ar / sd / eagle / sjd measured in the same run: each prompt x setting timed
  ``--repeats`` times interleaved (median per prompt), the speed-up the
  geometric mean of per-prompt paired ratios with a 95% bootstrap interval
  (``paired``); and the per-pass time split (``steps.Step``);
- quality: per-token NLL of the generated tokens under the target's guided
  distribution (``metrics.sequence_nll``), the realised TVD of the relaxation,
  and, with our eval encoder (``lantern_demo.emoji.features``; weights in ``assets/eval``),
  Fréchet distance and k-NN precision/recall vs the held-out emoji images and
  prompt-retrieval accuracy.

Outputs (``--out``): results.md (the tables), results.json (every raw number,
per prompt), tradeoff.png, accepted_hist.png, samples.png; ``--update-docs``
rewrites the generated blocks of the given markdown files instead of results.md. Under
``accelerate launch`` prompts are sharded by process rank and the main process
merges the records; numbers other than timings equal a single-process run.
"""
