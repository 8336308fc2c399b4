"""Neighbour tables: top-K by L2 / cosine, self excluded, and the disk cache."""

import torch

from lantern_demo.neighbors import build_neighbor_table, neighbor_table


def test_table_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    codebook = torch.randn(50, 8, generator=g)
    table = build_neighbor_table(codebook, K=7, chunk=16)
    assert table.shape == (50, 7) and table.dtype == torch.int64
    for x in range(50):
        d = ((codebook - codebook[x]) ** 2).sum(1)
        d[x] = float("inf")
        assert table[x].tolist() == torch.argsort(d)[:7].tolist()
        assert x not in table[x].tolist()


def test_cosine_metric_ignores_norm():
    g = torch.Generator().manual_seed(1)
    codebook = torch.randn(30, 4, generator=g)
    scaled = codebook * torch.rand(30, 1, generator=g).add(0.5)
    assert torch.equal(build_neighbor_table(codebook, 5, "cosine"), build_neighbor_table(scaled, 5, "cosine"))


def test_disk_cache_round_trip(tmp_path):
    codebook = torch.randn(20, 3)
    first = neighbor_table(codebook, 4, cache_dir=tmp_path)
    files = list(tmp_path.glob("*.safetensors"))
    assert len(files) == 1
    assert torch.equal(neighbor_table(codebook, 4, cache_dir=tmp_path), first)
    neighbor_table(codebook + 1.0, 4, cache_dir=tmp_path)  # another codebook, another key
    assert len(list(tmp_path.glob("*.safetensors"))) == 2
