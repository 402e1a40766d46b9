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
