import gc
import threading

import torch
import torch.nn.functional as F

from engine.model import matmul


def test_large_products_match_f_linear_and_follow_in_place_changes():
    torch.manual_seed(0)
    weight, x = torch.randn(1024, 192), torch.randn(2, 6, 192)  # above the packing threshold
    with torch.inference_mode():
        assert torch.allclose(matmul.linear(x, weight), F.linear(x, weight), atol=1e-4)
        weight.mul_(2.0)  # a packed copy made before this must not be used again
        assert torch.allclose(matmul.linear(x, weight), F.linear(x, weight), atol=1e-4)
        small = torch.randn(1, 192)
        assert torch.equal(matmul.linear(small, weight), F.linear(small, weight))  # MKL, bit for bit
    key = (id(weight), torch.float32)
    assert key in matmul._packed
    del weight
    gc.collect()
    assert key not in matmul._packed  # the packed copy goes with its weight


def test_one_packed_copy_serves_every_row_count_and_strided_inputs():
    torch.manual_seed(0)
    weight = torch.randn(4096, 256)  # the head: packed from one row
    assert 256 * 4096 >= matmul.PACKED_MIN_MACS
    with torch.inference_mode():
        for rows in range(1, 41):
            x = torch.randn(rows, 256)
            assert torch.allclose(matmul.linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-4), rows
        strided = torch.randn(2, 5, 256)[:, -1:]  # (2, 1, 256): the last position of each CFG row
        assert torch.allclose(matmul.linear(strided, weight), F.linear(strided, weight), rtol=1e-5, atol=1e-4)
    if matmul.FLOAT32_PACKER is not None:
        assert [key for key in matmul._packed if key[0] == id(weight)] == [(id(weight), torch.float32)]


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


def test_a_sampling_decode_multiplies_only_its_large_products_in_bfloat16_and_only_in_its_thread(monkeypatch):
    monkeypatch.setattr(matmul, "LARGE_MIN_MACS", 1_500_000)  # the threshold of CPUs other than AMD's
    torch.manual_seed(0)
    weight = torch.randn(768, 256)
    wide = torch.randn(1, 14, 256)  # a 7-node tree's CFG rows: 2.75 million multiply-adds
    narrow = torch.randn(1, 2, 256)  # a one-token step's: 0.39 million
    assert wide.numel() * 768 >= matmul.LARGE_MIN_MACS > narrow.numel() * 768
    large = matmul.LargeProductsInBfloat16(enabled=True)
    with torch.inference_mode():
        exact_wide = F.linear(wide, weight)
        float32_narrow = matmul.linear(narrow, weight)  # F.linear, MKL's or oneDNN's, by the CPU
        layer = torch.nn.Linear(256, 768, bias=False)
        layer.weight.copy_(weight)
        matmul.multiply_in(layer, torch.bfloat16)
        rounded_wide = matmul.linear(wide, layer.weight)  # every product in bfloat16
        in_other_thread = []
        with large:
            assert torch.equal(matmul.linear(wide, weight), rounded_wide)
            assert torch.equal(matmul.linear(narrow, weight), float32_narrow)  # float32, as outside
            worker = threading.Thread(target=lambda: in_other_thread.append(matmul.linear(wide, weight)))
            worker.start()
            worker.join()
        assert torch.allclose(in_other_thread[0], exact_wide, atol=1e-4)  # another user's decode
        assert torch.allclose(matmul.linear(wide, weight), exact_wide, atol=1e-4)  # left: float32 again
        assert not torch.allclose(rounded_wide, exact_wide, atol=1e-4)
        with large:  # reusable, as the decoding loop enters it once a step
            assert torch.equal(matmul.linear(wide, weight), rounded_wide)
        with matmul.LargeProductsInBfloat16(enabled=False):
            assert torch.allclose(matmul.linear(wide, weight), exact_wide, atol=1e-4)


def test_only_sampling_decodes_of_float32_models_round_their_large_products():
    layer = torch.nn.Linear(256, 768, bias=False)
    assert matmul.rounds_large_products(layer.weight, greedy=False) == matmul.NATIVE_BFLOAT16
    assert not matmul.rounds_large_products(layer.weight, greedy=True)  # greedy claims vanilla's bits
    matmul.multiply_in(layer, torch.bfloat16)
    assert not matmul.rounds_large_products(layer.weight, greedy=False)  # all its products are already
