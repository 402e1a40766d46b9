import numpy as np
import pytest
import torch

from engine.core.config import InvalidInput
from engine.rules.neighbours import neighbour_table


def unit_codebook(vocab: int = 64, dim: int = 8) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.nn.functional.normalize(torch.randn(vocab, dim), dim=-1)


def test_table_lists_the_nearest_other_codes_nearest_first():
    codebook = unit_codebook()
    table = neighbour_table(codebook, 5)
    assert table.shape == (64, 5) and table.dtype == np.int64
    distances = torch.cdist(codebook.double(), codebook.double()).numpy()
    for code in range(64):
        assert code not in table[code]
        order = np.argsort(distances[code])[1:6]  # position 0 is the code itself
        np.testing.assert_array_equal(table[code], order)


def test_l2_and_cosine_agree_on_an_l2_normalised_codebook():
    codebook = unit_codebook()
    np.testing.assert_array_equal(neighbour_table(codebook, 16, "l2"), neighbour_table(codebook, 16, "cosine"))


def test_random_neighbours_are_reproducible_and_differ_from_latent_ones():
    codebook = unit_codebook()
    a, b = neighbour_table(codebook, 8, "random"), neighbour_table(codebook, 8, "random")
    np.testing.assert_array_equal(a, b)
    assert (a != neighbour_table(codebook, 8, "l2")).mean() > 0.5
    assert all(code not in a[code] for code in range(64))


@pytest.mark.parametrize("k", [0, 64])
def test_k_outside_the_codebook_is_rejected(k):
    with pytest.raises(InvalidInput, match=f"k {k} is out of range; allowed: 1 to 63"):
        neighbour_table(unit_codebook(), k)


def test_unknown_metric_is_rejected():
    with pytest.raises(InvalidInput, match="unknown neighbour metric 'manhattan'"):
        neighbour_table(unit_codebook(), 4, "manhattan")


def brute_force_table(codebook: np.ndarray, k: int, distance) -> np.ndarray:
    """Each code's k nearest others by `distance(a, b)`, computed pair by pair, ties to the lower index."""
    vocab = len(codebook)
    table = np.empty((vocab, k), dtype=np.int64)
    for code in range(vocab):
        others = [(distance(codebook[code], codebook[other]), other) for other in range(vocab) if other != code]
        table[code] = [other for _, other in sorted(others)[:k]]
    return table


def test_l2_and_cosine_tables_match_pairwise_distances_over_several_chunks():
    """600 codes of uneven norms: more than one chunk of 512 rows, and cosine's order differs from l2's
    (and from the plain dot product's), so each metric is told apart."""
    rng = np.random.default_rng(3)
    codebook = rng.normal(size=(600, 4)) * rng.uniform(0.2, 3.0, size=(600, 1))  # (600, 4)

    def cosine(a, b):
        return 1.0 - a @ b / np.sqrt((a @ a) * (b @ b))

    l2 = neighbour_table(torch.from_numpy(codebook), 3, "l2")
    by_cosine = neighbour_table(torch.from_numpy(codebook), 3, "cosine")
    np.testing.assert_array_equal(l2, brute_force_table(codebook, 3, lambda a, b: np.sum((a - b) ** 2)))
    np.testing.assert_array_equal(by_cosine, brute_force_table(codebook, 3, cosine))
    assert (l2 != by_cosine).mean() > 0.3


@pytest.mark.parametrize("k", [1, 63])
def test_k_at_either_end_of_its_range_is_allowed(k):
    codebook = unit_codebook()
    table = neighbour_table(codebook, k)
    assert table.shape == (64, k)
    if k == 63:  # every other code, the code itself never
        assert all(sorted(table[code]) == [c for c in range(64) if c != code] for code in range(64))


def test_an_unknown_metric_names_the_allowed_ones():
    with pytest.raises(InvalidInput, match="allowed: l2, cosine, random$"):
        neighbour_table(unit_codebook(), 4, "L2")
