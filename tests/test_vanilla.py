import numpy as np
import pytest
import torch

from engine.core.config import InvalidInput, SamplingConfig
from engine.core.sampling import combine_cfg, filter_top_k_top_p, nucleus
from engine.generation import generate, tokens_to_image


def naive_greedy(model, class_id: int, cfg_scale: float) -> list[int]:
    """Greedy decoding by recomputing the whole sequence at every step, with no cache."""
    target = model.target
    tokens: list[int] = []
    rows = torch.tensor([class_id, target.null_class])
    with torch.no_grad():
        for _ in range(target.cfg.num_image_tokens):
            seq = torch.tensor(tokens + [0]).expand(2, -1)  # the last entry is never read
            logits = target.training_logits(rows, seq)[:, -1:]  # (2, 1, V)
            tokens.append(int(combine_cfg(logits, cfg_scale)[0].argmax()))
    return tokens


def test_greedy_equals_full_recomputation(tiny_model):
    result = generate(tiny_model, "vanilla", SamplingConfig(temperature=0.0, cfg_scale=3.0), 2)
    assert result.tokens.tolist() == naive_greedy(tiny_model, 2, 3.0)
    assert result.steps == tiny_model.target.cfg.num_image_tokens - 1
    assert result.mean_accepted_length == 1.0


def test_seeded_sampling_is_reproducible_and_seeds_differ(tiny_model):
    runs = [generate(tiny_model, "vanilla", SamplingConfig(temperature=1.0, seed=s), 1).tokens
            for s in (7, 7, 8)]
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_top_k_and_top_p_keep_the_expected_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept_k = filter_top_k_top_p(logits, top_k=2, top_p=1.0).isfinite()
    assert kept_k.tolist() == [[True, True, False, False]]
    kept_p = filter_top_k_top_p(logits, top_k=0, top_p=0.7).isfinite()
    assert kept_p.tolist() == [[True, True, False, False]]
    kept_tiny_p = filter_top_k_top_p(logits, top_k=0, top_p=0.01).isfinite()
    assert kept_tiny_p.tolist() == [[True, False, False, False]]


def test_nucleus_keeps_what_top_p_keeps_also_beyond_its_first_look():
    gen = torch.Generator().manual_seed(0)
    for flatness in (0.2, 1.0, 4.0):  # 0.2: a nucleus of thousands of codes, beyond the first 64 looked at
        probs = (torch.randn(4096, generator=gen) * flatness).softmax(-1).double()
        for top_p in (0.3, 0.8, 0.99):
            expected = filter_top_k_top_p(probs.log()[None], 0, top_p)[0].softmax(-1)
            got = nucleus(probs, top_p)
            assert torch.equal(got > 0, expected > 0)
            assert torch.allclose(got, expected, rtol=0, atol=1e-12)
    assert (nucleus((torch.randn(4096, generator=gen) * 0.2).softmax(-1).double(), 0.8) > 0).sum() > 64


def test_sampling_respects_top_k(tiny_model):
    result = generate(tiny_model, "vanilla", SamplingConfig(temperature=1.0, top_k=1, seed=3), 0)
    greedy = generate(tiny_model, "vanilla", SamplingConfig(temperature=0.0), 0)
    assert np.array_equal(result.tokens, greedy.tokens)


def test_tokens_decode_to_an_image(tiny_model):
    result = generate(tiny_model, "vanilla", SamplingConfig(temperature=1.0), "green")
    image = tokens_to_image(tiny_model, result.tokens)
    assert image.size == (8, 8) and image.mode == "RGB"


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(temperature=-0.5), "temperature -0.5"),
    (dict(top_p=0.0), "top-p 0.0"),
    (dict(top_p=1.5), "top-p 1.5"),
    (dict(top_k=-1), "top-k -1"),
    (dict(cfg_scale=0.5), "CFG scale 0.5"),
    (dict(seed=-1), "seed -1"),
])
def test_bad_sampling_values_name_the_value_and_the_range(kwargs, fragment):
    with pytest.raises(InvalidInput, match=fragment) as err:
        SamplingConfig(**kwargs)
    assert "allowed" in str(err.value)


@pytest.mark.parametrize("class_id, fragment", [(5, "class id 5"), (-1, "class id -1"),
                                                 ("purple", "unknown class 'purple'")])
def test_unknown_class_is_rejected(tiny_model, class_id, fragment):
    with pytest.raises(InvalidInput, match=fragment):
        generate(tiny_model, "vanilla", SamplingConfig(), class_id)


def test_unknown_method_is_rejected(tiny_model):
    with pytest.raises(InvalidInput, match="unknown method 'fast'"):
        generate(tiny_model, "fast", SamplingConfig(), 0)


@pytest.mark.parametrize("temperature, rounds", [(1.0, True), (0.0, False)])
def test_only_a_sampling_decode_multiplies_its_large_products_in_bfloat16(tiny_eagle, monkeypatch, temperature,
                                                                          rounds):
    from engine.model import matmul

    monkeypatch.setattr(matmul, "NATIVE_BFLOAT16", True)  # as on a CPU with native bfloat16 products
    seen: list[bool] = []
    target_type = type(tiny_eagle.target)
    forward = target_type.forward
    monkeypatch.setattr(target_type, "forward", lambda self, *args, **kwargs: (
        seen.append(getattr(matmul._large, "on", False)), forward(self, *args, **kwargs))[1])
    generate(tiny_eagle, "eagle2", SamplingConfig(temperature=temperature, seed=3), 1)
    assert seen and set(seen) == {rounds}  # every target pass, the prefill's included
    assert not getattr(matmul._large, "on", False)  # and nothing after the decode
