"""Distribution tests with a stated power: LANTERN at delta = 0 and whole lossless decodes.

The rule-level checks reuse the exact rule's walks of tests/test_acceptance.py; the decodes sample
whole images of a target small enough to enumerate, and compare their frequencies with each image's
probability computed here by teacher-forced passes (tests/distribution_checks.py has the statistics).
"""
import itertools

import numpy as np
import pytest
import torch

from engine.core.config import SamplingConfig
from engine.core.sampling import combine_cfg, distribution
from engine.drafters.eagle_net import EagleNet
from engine.generation import generate
from engine.loading.image_model import ImageModel
from engine.methods import MethodOptions
from engine.model.gpt import GPTConfig
from engine.rules.lantern import DeltaBound, lantern_rule
from tests.conftest import tiny_gpt
from tests.distribution_checks import POWER, chi_square, chi_square_limit, smallest_effect
from tests.test_acceptance import (
    P_NEXT,
    P_RARE,
    Q_NEXT,
    Q_RARE,
    assert_stated_power,
    check_exact_walks,
    sampled_chains,
)


def test_paper_lantern_at_zero_delta_samples_the_target():
    """LANTERN's paper variant with delta = 0 moves no mass, so its output must be p, whatever the
    neighbour table. The exact rule's sampled-chain check of tests/test_acceptance.py: 25,000 walks,
    a z-test per token at two positions and one on the accepted drafts' count against the exact
    chances, |z| <= 5.04 (family alpha 1e-5); a token of p = 0.01 doubled, halved or dropped is
    caught with power > 0.999, acceptance 0.02 too generous with 0.99 (computed and asserted)."""
    vocab = len(P_RARE)
    table = np.array([[(i + j) % vocab for j in range(1, vocab)] for i in range(vocab)])  # next codes
    rule = lantern_rule(table, DeltaBound(0.0), "paper")
    trees = sampled_chains(Q_RARE, Q_NEXT, seed=22)
    powers = check_exact_walks(trees, np.stack([P_RARE, P_NEXT, P_NEXT]), seed=23, rule=rule)
    assert_stated_power(powers, second_position=True)


# --- Whole decodes on an enumerable model ---------------------------------------------------------
# A 2 x 2 grid over a codebook of 4: 256 possible images, each one's probability computable exactly.
ENUM_GPT = GPTConfig(dim=64, n_layer=2, n_head=4, vocab_size=4, num_classes=3, cls_token_num=1, grid_size=2)
ENUM_DRAFT = GPTConfig(dim=32, n_layer=1, n_head=2, vocab_size=4, num_classes=3, grid_size=2)
CLASS = 1
SAMPLING_SETUP = SamplingConfig(temperature=1.0, cfg_scale=4.0)  # CFG on, as decodes use it by default
N_IMAGES = 400  # decodes per method
# PJD with one row in flight is SJD within each row: lossless too (ZipAR's one row is vanilla's
# draws, tests/test_rows.py).
LOSSLESS = ["vanilla", "eagle", "eagle2", "sps", "sjd", "sjd_coupled", "pjd"]
OPTIONS = {"pjd": MethodOptions(rows_in_flight=1)}


@pytest.fixture(scope="module")
def enumerable():
    model = ImageModel(tiny_gpt(0, ENUM_GPT), None, ("red", "green", "blue"), name="enumerable")
    torch.manual_seed(1)
    model.drafters["eagle"] = EagleNet(ENUM_GPT).eval()  # untrained: its drafts are q, not p
    model.drafters["sps"] = tiny_gpt(2, ENUM_DRAFT)
    return model


def image_probabilities(model: ImageModel, sampling: SamplingConfig) -> tuple[list[tuple], np.ndarray]:
    """Every image and its probability under the target as decode judges it: teacher-forced logits
    of the class row and the null row, mixed by CFG, turned into p by the sampling setup, and
    multiplied along the raster order."""
    cfg = model.target.cfg
    images = list(itertools.product(range(cfg.vocab_size), repeat=cfg.num_image_tokens))
    tokens = torch.tensor(images)  # (I, N)
    with torch.no_grad():
        rows = [model.target.training_logits(torch.full((len(images),), c), tokens)
                for c in (CLASS, model.target.null_class)]  # 2 x (I, N, V)
    logits = combine_cfg(torch.stack(rows).flatten(1, 2), sampling.cfg_scale)  # (I * N, V)
    p = distribution(logits, sampling).view(len(images), cfg.num_image_tokens, -1)  # (I, N, V)
    return images, p.gather(2, tokens[..., None])[..., 0].prod(1).numpy()


def test_enumerated_probabilities_are_a_distribution(enumerable):
    """The enumeration the decode test compares with covers every image once: its total is 1."""
    images, probs = image_probabilities(enumerable, SAMPLING_SETUP)
    assert len(images) == 256 and probs.sum() == pytest.approx(1.0, abs=1e-9)
    assert probs.max() < 0.5  # not a degenerate target: many images to tell apart


@pytest.mark.parametrize("method", LOSSLESS)
def test_lossless_methods_sample_the_targets_images(enumerable, method):
    """400 whole images of class 1 (seeds 0..399) with each lossless method; Pearson's chi-square of
    their frequencies against the enumerated probabilities, cells expected fewer than 5 times merged,
    fails above the chi-square quantile at alpha = 1e-5. The power is computed below from the
    non-central chi-square: the test catches, with 99 % probability, any method whose image
    distribution has Cohen's w = sqrt(sum (p1 - p0)^2 / p0) >= 0.42 (15 cells, 14 degrees of freedom,
    limit 48.7; asserted below). This is a coarse net, not the rule-level power of
    tests/test_acceptance.py: it shows that the whole loop (drafts, cache, positions, CFG) keeps the
    target's distribution. Drafting methods must have accepted some drafts."""
    images, probs = image_probabilities(enumerable, SAMPLING_SETUP)
    index = {image: i for i, image in enumerate(images)}
    counts = np.zeros(len(images))
    drafted = accepted = 0
    for seed in range(N_IMAGES):
        run = generate(enumerable, method, SamplingConfig(temperature=1.0, cfg_scale=4.0, seed=seed), CLASS,
                       OPTIONS.get(method))
        counts[index[tuple(run.tokens.tolist())]] += 1
        drafted += sum(t.drafted for t in run.traces[1:])
        accepted += sum(len(t.accepted_nodes) for t in run.traces[1:])
    statistic, df = chi_square(counts, probs)
    limit = chi_square_limit(df)
    assert statistic <= limit, (method, statistic, df, limit)
    assert smallest_effect(N_IMAGES, df, limit, POWER) < 0.43  # the stated power holds for this design
    if method != "vanilla":
        assert drafted > 0 and accepted / drafted > 0.05, (method, drafted, accepted)
