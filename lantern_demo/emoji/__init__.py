"""What training (``lantern_demo.train``) and the benchmark (``lantern_demo.bench``) share about the
emoji model: the datasets, the evaluation encoder, the target's batched samples, the VQ token rule and
the weights folder's metrics records. Neither of them is imported here."""
