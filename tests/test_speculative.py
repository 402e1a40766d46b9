import numpy as np
import pytest
import torch

from engine.config import SamplingConfig, TreeConfig
from engine.drafters.eagle_net import EagleNet
from engine.generate import generate
from engine.methods import MethodOptions
from tests.conftest import TINY_GPT


@pytest.fixture
def tiny_with_drafters(tiny_model):
    torch.manual_seed(1)
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    return tiny_model


@pytest.mark.parametrize("method", ["eagle2"])
@pytest.mark.parametrize("tree", [TreeConfig(3, 3, 8), TreeConfig(1, 1, 2), TreeConfig(5, 4, 24)])
def test_lossless_methods_reproduce_vanilla_greedy(tiny_with_drafters, method, tree):
    sampling = SamplingConfig(temperature=0.0, cfg_scale=2.0)
    vanilla = generate(tiny_with_drafters, "vanilla", sampling, 1)
    fast = generate(tiny_with_drafters, method, sampling, 1, MethodOptions(tree=tree))
    assert np.array_equal(vanilla.tokens, fast.tokens)
    assert fast.steps <= vanilla.steps


def test_lantern_with_zero_delta_equals_eagle2(tiny_with_drafters):
    for temperature in (0.0, 1.0):
        sampling = SamplingConfig(temperature=temperature, seed=5)
        exact = generate(tiny_with_drafters, "eagle2", sampling, 0)
        relaxed = generate(tiny_with_drafters, "lantern", sampling, 0, MethodOptions(delta=0.0, k=8))
        assert np.array_equal(exact.tokens, relaxed.tokens)
