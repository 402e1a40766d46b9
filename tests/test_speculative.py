import numpy as np
import pytest
import torch

from engine.core.config import SamplingConfig, TreeConfig
from engine.drafters.base import Drafter
from engine.drafters.eagle_net import EagleNet
from engine.drafters.medusa import MedusaConfig, MedusaHeads
from engine.generation import generate
from engine.methods import MethodOptions
from engine.model.gpt import GPTConfig
from tests.accepting import assert_lossless
from tests.conftest import TINY_GPT, tiny_gpt

TINY_DRAFT = GPTConfig(dim=32, n_layer=1, n_head=2, vocab_size=64, num_classes=3, grid_size=4)


@pytest.fixture
def tiny_with_drafters(tiny_model):
    torch.manual_seed(1)
    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT).eval()
    tiny_model.drafters["sps"] = tiny_gpt(seed=2, config=TINY_DRAFT)
    tiny_model.drafters["medusa"] = MedusaHeads(MedusaConfig(TINY_GPT.dim, TINY_GPT.vocab_size, 3)).eval()
    return tiny_model


# Each lossless method with the drafts that drive it: EAGLE-2's dynamic trees (a wide one, a single
# draft, a deep one), SpS's chains, SJD's windows. The last number is the least count of drafts
# accepted (of 15 tokens after the first), about two thirds of what was measured (in brackets).
LOSSLESS_CASES = [
    pytest.param("eagle2", MethodOptions(tree=TreeConfig(3, 3, 8)), 7, id="eagle2-wide"),  # [11]
    pytest.param("eagle2", MethodOptions(tree=TreeConfig(1, 1, 2)), 5, id="eagle2-one"),  # [8: one a pass]
    pytest.param("eagle2", MethodOptions(tree=TreeConfig(5, 4, 24)), 7, id="eagle2-deep"),  # [11]
    pytest.param("sps", MethodOptions(gamma=1), 4, id="sps-1"),  # [6]
    pytest.param("sps", MethodOptions(gamma=4), 7, id="sps-4"),  # [11]
    pytest.param("sps", MethodOptions(gamma=8), 7, id="sps-8"),  # [11]
    pytest.param("sjd", MethodOptions(window=5), 5, id="sjd-5"),  # [8]
    pytest.param("sjd", MethodOptions(window=16), 6, id="sjd-16"),  # [9]
]


@pytest.mark.parametrize("method, options, least", LOSSLESS_CASES)
def test_lossless_methods_reproduce_vanilla_greedy(tiny_accepting, jacobi_model, method, options, least):
    """With drafts that are accepted (tests/accepting.py), so that the accepted path's tokens and
    cache are what makes the picture equal vanilla's."""
    model = jacobi_model if method == "sjd" else tiny_accepting
    sampling = SamplingConfig(temperature=0.0, cfg_scale=2.0)
    vanilla = generate(model, "vanilla", sampling, 1)
    fast = generate(model, method, sampling, 1, options)
    assert_lossless(fast, vanilla, least)


def test_lantern_with_zero_delta_equals_eagle2(tiny_accepting):
    """On the same trees (ranked by draft probability: the rule-aware ranking differs between the
    two rules even when their verdicts agree), delta 0 makes LANTERN's decisions the exact rule's:
    with the trained drafter, whose drafts are accepted, the same drafts kept pass by pass."""
    tree = TreeConfig(score="draft")
    for temperature in (0.0, 1.0):
        sampling = SamplingConfig(temperature=temperature, seed=5)
        exact = generate(tiny_accepting, "eagle2", sampling, 0, MethodOptions(tree=tree))
        relaxed = generate(tiny_accepting, "lantern", sampling, 0, MethodOptions(delta=0.0, k=8, tree=tree))
        assert np.array_equal(exact.tokens, relaxed.tokens)
        assert [t.accepted_nodes for t in exact.traces] == [t.accepted_nodes for t in relaxed.traces]
        assert sum(len(t.accepted_nodes) for t in exact.traces) >= 3


@pytest.mark.parametrize("method", ["medusa", "relaxed_sjd", "lantern"])
def test_lossy_methods_generate_whole_images(tiny_with_drafters, method):
    for temperature in (0.0, 1.0):
        result = generate(tiny_with_drafters, method, SamplingConfig(temperature=temperature), 2,
                          MethodOptions(k=8, delta=0.3))
        assert result.tokens.shape == (TINY_GPT.num_image_tokens,)
        assert sum(t.accepted_length for t in result.traces) == TINY_GPT.num_image_tokens


class OracleDrafter(Drafter):
    """Drafts the true greedy continuation as the second child of every node, behind a wrong first
    child, so that verification must reject, move on to a sibling, and keep a deep path."""

    def __init__(self, truth: list[int], vocab: int):
        self.truth, self.vocab = truth, vocab

    def reset(self, state, prefix_hidden):
        pass

    def observe(self, state, tree, kept, hidden, probs):
        pass

    def largest_tree(self):
        return 7  # the root and two children at each of three levels

    def propose(self, state, root, max_depth):
        from engine.core.tree import DraftTree

        start = len(state.tokens)
        tokens, parents = [root], [-1]
        parent = 0
        for depth in range(min(3, max_depth)):
            right = self.truth[start + depth]
            tokens += [(right + 1) % self.vocab, right]
            parents += [parent, parent]
            parent = len(tokens) - 1
        return DraftTree(torch.tensor(tokens), torch.tensor(parents),
                         torch.ones(len(tokens), dtype=torch.float64))


def test_accepted_paths_keep_the_cache_consistent(tiny_model):
    from engine.loop.decode import decode
    from engine.rules.acceptance import ExactRule

    sampling = SamplingConfig(temperature=0.0, cfg_scale=2.0)
    truth = generate(tiny_model, "vanilla", sampling, 1).tokens.tolist()
    traces = list(decode(tiny_model.target, OracleDrafter(truth, 64), ExactRule(), sampling, 1))
    assert traces[-1].tokens_so_far.tolist() == truth
    # Three drafts accepted and one bonus token per pass: 1 + ceil(15 / 4) passes in all.
    assert len(traces) == 1 + 4
    assert all(not v.accepted for t in traces[1:] for v in t.verdicts[:1])


def test_keeping_an_accepted_path_gives_the_logits_of_a_full_recomputation():
    from engine.core.sampling import combine_cfg
    from engine.core.tree import DraftTree
    from engine.drafters.wavefront import Root
    from engine.loop.verify import PREFIX, Forest, target_pass
    from engine.model.kv_cache import KVCache

    model = tiny_gpt()
    cfg = TINY_GPT
    rows = torch.tensor([2, cfg.num_classes])
    prefix_tokens = [5, 9, 11]
    sampling = SamplingConfig(temperature=1.0, cfg_scale=1.5)
    with torch.no_grad():
        cache = KVCache(cfg.n_layer, 2, cfg.n_head, cfg.block_size + 16, cfg.head_dim)
        prefix = torch.tensor(prefix_tokens[:-1]).expand(2, -1)
        h = torch.cat([model.embed_condition(rows), model.embed_tokens(prefix)], 1)
        n = h.shape[1]
        pos = torch.arange(n)
        model(h, pos, cache, pos, torch.ones(n, n, dtype=torch.bool).tril())
        # Root = the last prefix token; two branches, the second (nodes 3, 4) is kept.
        tree = DraftTree(torch.tensor([prefix_tokens[-1], 7, 8, 20, 21]), torch.tensor([-1, 0, 1, 0, 3]),
                         torch.ones(5, dtype=torch.float64))
        # Slot raster indices: the condition's (PREFIX), then the image's first tokens.
        slot_positions = torch.tensor([PREFIX] * cfg.cls_token_num + list(range(n - cfg.cls_token_num)))
        root = Root(prefix_tokens[-1], n - cfg.cls_token_num, kept=True)
        target_pass(model, cache, slot_positions, Forest([tree], [root]), sampling, 2, cfg.cls_token_num)
        cache.keep(torch.tensor([0, 3, 4]) + n, n)
        slot_positions = torch.cat([slot_positions, root.position + torch.tensor([0, 1, 2])])
        after = Forest([DraftTree.root_only(30)], [Root(30, root.position + 3, kept=True)])
        kept_logits = target_pass(model, cache, slot_positions, after, sampling, 2, cfg.cls_token_num).probs[0]
        sequence = prefix_tokens + [20, 21, 30]
        full = model.training_logits(rows, torch.tensor(sequence + [0]).expand(2, -1))[:, -1:]
        from engine.core.sampling import distribution

        expected = distribution(combine_cfg(full, sampling.cfg_scale), sampling)[0].numpy()
    np.testing.assert_allclose(kept_logits, expected, rtol=1e-4, atol=1e-6)
