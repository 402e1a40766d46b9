import gc

import torch
import torch.nn.functional as F

from engine.model import matmul


def test_large_products_match_f_linear_and_follow_in_place_changes():
    torch.manual_seed(0)
    weight, x = torch.randn(1024, 192), torch.randn(2, 6, 192)  # above the oneDNN threshold
    with torch.inference_mode():
        assert torch.allclose(matmul.linear(x, weight), F.linear(x, weight), atol=1e-4)
        weight.mul_(2.0)  # a packed copy made before this must not be used again
        assert torch.allclose(matmul.linear(x, weight), F.linear(x, weight), atol=1e-4)
        small = torch.randn(1, 192)
        assert torch.equal(matmul.linear(small, weight), F.linear(small, weight))  # MKL, bit for bit
    key = id(weight)
    assert key in matmul._packed
    del weight
    gc.collect()
    assert key not in matmul._packed  # the packed copy goes with its weight


def test_products_that_need_gradients_stay_differentiable():
    weight = torch.nn.Parameter(torch.randn(1024, 192))
    x = torch.randn(12, 192, requires_grad=True)
    matmul.linear(x, weight).sum().backward()
    assert weight.grad is not None and x.grad is not None


def test_bfloat16_products_round_as_autocast_does_and_can_be_turned_off():
    torch.manual_seed(0)
    layer = torch.nn.Linear(192, 1024, bias=False)
    x = torch.randn(2, 3, 192)  # (B, T, in)
    with torch.inference_mode():
        exact = F.linear(x, layer.weight)
        matmul.multiply_in(layer, torch.bfloat16)
        low = matmul.linear(x, layer.weight)
        assert layer.weight.dtype == torch.float32 and low.dtype == torch.float32
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = F.linear(x, layer.weight).float()
        # Both sum bfloat16 products in float32 and round the sum to bfloat16: at most a rounding
        # step of it apart, where float32 differs from them by up to half a percent.
        assert torch.allclose(low, autocast, rtol=2 ** -7, atol=1e-6)
        assert not torch.allclose(low, exact, rtol=1e-4, atol=1e-5)
        assert torch.allclose(low, exact, rtol=0.02, atol=0.02 * float(exact.abs().mean()))
        matmul.multiply_in(layer, None)
        assert torch.allclose(matmul.linear(x, layer.weight), exact, atol=1e-4)
    key = id(layer.weight)
    matmul.multiply_in(layer, torch.bfloat16)
    del layer
    gc.collect()
    assert key not in matmul._product_dtypes  # the setting goes with its weight


def test_a_bfloat16_product_of_a_row_does_not_depend_on_the_rows_beside_it():
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 768, bias=False)
    matmul.multiply_in(layer, torch.bfloat16)
    x = torch.randn(1, 34, 256)  # (B, T, in): the two CFG rows of a 17-node tree
    with torch.inference_mode():
        full = matmul.linear(x, layer.weight)
        for rows in (1, 2, 4, 18):
            assert torch.equal(matmul.linear(x[:, :rows], layer.weight), full[:, :rows])
