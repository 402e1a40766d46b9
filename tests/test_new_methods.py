"""LANTERN++'s static tree, coupled SJD and its initialisations, and GSD's grouped rule.

The coupled-SJD statistical test draws N = 2,000 images of a 3 x 3 grid over a 3-token vocabulary
and compares every position's token frequencies with the target's exact marginals (enumerated over
all 3^9 sequences). A frequency's standard error is at most sqrt(0.25 / N) = 0.011; the tolerance
0.05 is about 4.5 of them.
"""
import itertools

import numpy as np
import pytest
import torch

from engine.core.config import InvalidInput, SamplingConfig
from engine.drafters.jacobi import JacobiDrafter
from engine.drafters.static_tree import EXACT_CHAIN, RELAXED_CHAIN, StaticTreeDrafter, chain, parse_choices
from engine.generation import Generation, generate
from engine.loop.decode import decode
from engine.methods import MethodOptions, get_method
from engine.model.gpt import GPT, GPTConfig
from engine.rules.acceptance import ExactRule
from engine.rules.gsd import GroupedRule, scaled_window
from tests.accepting import assert_lossless
from tests.conftest import TINY_GPT

GREEDY = SamplingConfig(temperature=0.0, cfg_scale=2.0)
SAMPLING = SamplingConfig(temperature=1.0)


# The least count of accepted drafts (of 15), about two thirds of what was measured (in brackets).
@pytest.mark.parametrize("choices, least", [pytest.param("0 1 2 0.0 0.1 1.0 0.0.0", 7, id="wide"),  # [11]
                                            pytest.param("0", 5, id="one"),  # [8: one a pass]
                                            pytest.param("0 0.0 0.0.0 0.0.0.0 0.1 3 3.2", 7, id="deep")])  # [10]
def test_a_static_tree_with_the_exact_rule_reproduces_vanilla_greedy(tiny_accepting, choices, least):
    """With a trained drafter (tests/accepting.py), so that the accepted paths make the picture."""
    vanilla = generate(tiny_accepting, "vanilla", GREEDY, 1)
    drafter = StaticTreeDrafter(tiny_accepting.drafters["eagle"], parse_choices(choices))
    traces = list(decode(tiny_accepting.target, drafter, ExactRule(), GREEDY, 1))
    assert_lossless(Generation("static", 1, traces[-1].tokens_so_far, traces, 0.0), vanilla, least)
    shapes = {len(t.tree_tokens) for t in traces[1:]}
    assert max(shapes) == 1 + len(choices.split())


def test_static_tree_paths_are_checked():
    with pytest.raises(InvalidInput, match="no parent"):
        parse_choices("0 1.0")
    with pytest.raises(InvalidInput, match="rank paths"):
        parse_choices("0 a")
    assert parse_choices("1 0.1 0 0.0") == ((0,), (1,), (0, 0), (0, 1))


@pytest.mark.parametrize("method, own", [("eagle", EXACT_CHAIN), ("lantern_static", RELAXED_CHAIN),
                                         ("lantern_pp", RELAXED_CHAIN)])
def test_a_static_tree_method_drafts_its_own_chain_unless_given_a_tree(tiny_eagle, method, own):
    drafter, _ = get_method(method).build(tiny_eagle, MethodOptions(k=8))
    assert drafter.choices == own == chain(len(own))
    given = parse_choices("0 1 0.0")
    assert get_method(method).build(tiny_eagle, MethodOptions(k=8, static_tree=given))[0].choices == given
    assert len(EXACT_CHAIN) < len(RELAXED_CHAIN)  # the exact rule accepts fewer drafts in a row


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_lantern_pp_generates_whole_images(tiny_eagle, temperature):
    result = generate(tiny_eagle, "lantern_pp", SamplingConfig(temperature=temperature), 2,
                      MethodOptions(k=8, lantern_lambda=3.0))
    assert sum(t.accepted_length for t in result.traces) == TINY_GPT.num_image_tokens


def test_lantern_on_a_static_chain_with_no_credit_samples_as_lossless_eagle(tiny_eagle):
    """At delta 0, where every neighbour has mass (the tiny model's p before any rejection), A is
    empty and the official rule on sampled drafts is the exact one: on a chain, which judges each
    draft on the full p, the same seed gives EAGLE's tokens."""
    sampling = SamplingConfig(temperature=1.0, cfg_scale=2.0, seed=4)
    chain = parse_choices("0 0.0 0.0.0")
    exact = generate(tiny_eagle, "eagle", sampling, 1, MethodOptions(static_tree=chain))
    relaxed = generate(tiny_eagle, "lantern_static", sampling, 1, MethodOptions(delta=0.0, k=8, static_tree=chain))
    assert np.array_equal(exact.tokens, relaxed.tokens)
    loose = generate(tiny_eagle, "lantern_static", sampling, 1, MethodOptions(delta=0.5, k=8, static_tree=chain))
    assert loose.steps < exact.steps  # credit lets more drafts through


@pytest.mark.parametrize("init", ["random", "left", "above"])
@pytest.mark.parametrize("method", ["sjd", "sjd_coupled"])
def test_jacobi_methods_reproduce_vanilla_greedy_from_every_initialisation(jacobi_model, method, init):
    """On a target whose guesses survive wrong neighbours (tests/accepting.py), so that Jacobi drafts
    are accepted: 5 of 15 at least, about two thirds of the 7 to 9 measured."""
    vanilla = generate(jacobi_model, "vanilla", GREEDY, 1)
    fast = generate(jacobi_model, method, GREEDY, 1, MethodOptions(sjd_init=init, window=5))
    assert_lossless(fast, vanilla, 5)


def test_copy_initialisations_draft_the_left_and_upper_tokens(tiny_model):
    drafts = {}
    for init in ("left", "above"):
        traces = list(decode(tiny_model.target, JacobiDrafter(4, init), ExactRule(), GREEDY, 0))
        first = traces[1]  # the first window: every draft is fresh
        drafts[init] = first.tree_tokens[1:].tolist()
        root_position = len(traces[0].new_tokens) - 1
        tokens = traces[-1].tokens_so_far.tolist()
        assert first.tree_tokens[0] == tokens[root_position]
    grid = TINY_GPT.grid_size
    root = int(traces[1].tree_tokens[0])
    assert drafts["left"] == [root] * 3 + drafts["left"][3:]  # positions 1..3 copy leftwards
    assert drafts["above"][grid - 1] == root  # position grid copies position 0


def test_gsd_with_a_group_of_one_is_the_exact_rule():
    rng = np.random.default_rng(0)
    vocab = 16
    embeddings = rng.normal(size=(vocab, 4))
    for rule in (GroupedRule(embeddings, 0, 0.15, 0.25), GroupedRule(embeddings, 3, 0.0, 0.25),
                 GroupedRule(embeddings, 3, 0.15, 0.0)):
        for _ in range(100):
            p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
            token, u = int(rng.integers(vocab)), float(rng.random())
            for q_dist in (None, q):
                a = ExactRule().bind(SAMPLING).test(p, token, q_dist, u)
                b = rule.bind(SAMPLING).test(p, token, q_dist, u)
                assert (a.accepted, a.accept_prob) == (b.accepted, pytest.approx(b.accept_prob))
                np.testing.assert_allclose(a.residual, b.residual)


def test_gsd_with_a_group_of_one_decodes_as_sjd_with_the_same_drafts(tiny_model):
    sampling = SamplingConfig(temperature=1.0, seed=3)
    gsd = generate(tiny_model, "gsd", sampling, 1, MethodOptions(gsd_window=0)).tokens
    drafter = JacobiDrafter(MethodOptions.window, fresh_point_mass=True)
    sjd = list(decode(tiny_model.target, drafter, ExactRule(), sampling, 1))[-1].tokens_so_far
    assert np.array_equal(gsd, sjd)


def test_gsd_groups_close_ranks_within_the_thresholds():
    p = np.array([0.05, 0.10, 0.12, 0.13, 0.30, 0.30])
    embeddings = np.array([[0.0], [0.1], [0.1], [5.0], [0.0], [0.0]])
    rule = GroupedRule(embeddings, 2, 0.15, 1.0)  # mean squared distance is large: 5.0 is still far
    group = rule.group(p, 2).tolist()
    assert group[0] == 2 and set(group) == {2, 0, 1}  # rank neighbours 0, 1 (near), 3 (far away)
    assert scaled_window(8192) == 7 and scaled_window(1024) == 1 and scaled_window(16384) == 14


def _exact_marginals(model: GPT, vocab: int, n: int) -> np.ndarray:
    """(n, V): the target's marginal distribution at every position, class 0, no guidance."""
    sequences = torch.tensor(list(itertools.product(range(vocab), repeat=n)))  # (V^n, n)
    with torch.no_grad():
        logits = model.training_logits(torch.zeros(len(sequences), dtype=torch.long), sequences)
    logp = logits.double().log_softmax(-1).gather(-1, sequences[..., None])[..., 0].sum(-1)  # (V^n,)
    joint = logp.exp().numpy()
    return np.stack([np.bincount(sequences[:, i].numpy(), weights=joint, minlength=vocab) for i in range(n)])


def test_coupled_sjd_samples_the_target_distribution():
    cfg = GPTConfig(dim=32, n_layer=1, n_head=2, vocab_size=3, num_classes=2, cls_token_num=1, grid_size=3)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    with torch.no_grad():
        model.output.weight.mul_(6.0)  # distinct, position-dependent distributions
    truth = _exact_marginals(model, cfg.vocab_size, cfg.num_image_tokens)
    draws = 2000
    counts = np.zeros_like(truth)
    coupled_steps = 0
    for seed in range(draws):
        sampling = SamplingConfig(temperature=1.0, cfg_scale=1.0, seed=seed)
        traces = list(decode(model, JacobiDrafter(8, coupled=True), ExactRule(), sampling, 0))
        counts[np.arange(cfg.num_image_tokens), traces[-1].tokens_so_far] += 1
        coupled_steps += len(traces) > 2
    assert coupled_steps > draws // 2  # most images needed a second window, where coupling acts
    assert np.abs(counts / draws - truth).max() < 0.05


@pytest.mark.parametrize("width", [1, 3])
def test_sampled_static_siblings_with_the_exact_rule_sample_the_target(width):
    """Children drawn without replacement from a draft q (one: a plain inverse-CDF draw), each judged
    against q without the earlier draws: the first token's frequencies match p (N = 10,000, tolerance
    0.023, about five standard errors of a probability of at most 0.3)."""
    from types import SimpleNamespace


    p = np.array([0.30, 0.22, 0.18, 0.12, 0.08, 0.06, 0.03, 0.01])
    q = torch.tensor([0.05, 0.05, 0.40, 0.10, 0.10, 0.10, 0.10, 0.10])
    drafter = StaticTreeDrafter.__new__(StaticTreeDrafter)
    drafter.width, drafter.top_p = width, 1.0
    generator = torch.Generator().manual_seed(0)
    state = SimpleNamespace(sampling=SamplingConfig(temperature=1.0), generator=generator)
    counts = np.zeros(len(p))
    draws = 10_000
    for _ in range(draws):
        ranked = drafter._ranked_children(state, q)
        tree = StaticTreeDrafter._tree(0, [t for t, _, _ in ranked], [-1] * width, [v for _, v, _ in ranked],
                                       [d for _, _, d in ranked])
        uniforms = torch.rand(5, generator=generator, dtype=torch.float64).numpy()
        result = ExactRule().bind(SAMPLING).walk(tree, np.stack([p] * 4), uniforms)
        first = int(tree.tokens[result.accepted_nodes[0]]) if result.accepted_nodes else result.next_token
        counts[first] += 1
    assert np.abs(counts / draws - p).max() < 0.023


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_eagle_on_the_static_tree_is_lossless_under_greedy_and_runs_under_sampling(tiny_accepting, temperature):
    sampling = SamplingConfig(temperature=temperature, seed=2)
    result = generate(tiny_accepting, "eagle", sampling, 1)
    if temperature == 0.0:
        # The trained drafter's chains of 3 are mostly accepted: 7 of 15 at least (10 measured).
        assert_lossless(result, generate(tiny_accepting, "vanilla", sampling, 1), 7)
    assert sum(t.accepted_length for t in result.traces) == TINY_GPT.num_image_tokens
