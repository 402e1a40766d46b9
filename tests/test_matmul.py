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
