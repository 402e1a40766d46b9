"""The EAGLE drafter's training view of a sequence equals what drafting computes step by step."""
import pytest
import torch

from engine.core.config import SamplingConfig, TreeConfig
from engine.core.sampling import combine_cfg
from engine.drafters.base import DecodeState
from engine.drafters.eagle import EagleDrafter
from engine.drafters.eagle_net import EagleNet, above_embeddings, above_for_drafting, training_forward, unrolled_mask
from engine.rules.acceptance import ExactRule
from engine.train.features import sequence_features
from tests.conftest import TINY_GPT, tiny_gpt


def _drafting_view(net: EagleNet, target, tokens: torch.Tensor, features: torch.Tensor, t: int) -> tuple:
    """Depth-1 and depth-2 predictions after true pair t, through the KV cache as drafting does:
    the true pairs 0..t, then x_{t+1} paired with the drafter's own prediction at t."""
    cls = target.cfg.cls_token_num
    cache = net.new_cache(1, t + 2)
    above = above_embeddings(target, tokens)  # (1, N, D)
    emb = target.embed_tokens(tokens)  # (1, N, D)
    causal = torch.ones(t + 1, t + 1, dtype=torch.bool).tril()
    out = net(emb[:, : t + 1], features[:, : t + 1], target.rope[cls + torch.arange(t + 1)], cache,
              torch.arange(t + 1), causal, above[:, : t + 1])  # (1, t + 1, D)
    first = out[:, t]
    node = net(emb[:, t + 1: t + 2], first[:, None], target.rope[[cls + t + 1]], cache,
               torch.tensor([t + 1]), torch.ones(1, t + 2, dtype=torch.bool), above[:, t + 1: t + 2])
    return first[0], node[0, 0]


@pytest.mark.parametrize("above", [False, True])
def test_unrolled_training_forward_matches_drafting_with_the_cache(above):
    target = tiny_gpt()
    torch.manual_seed(1)
    net = EagleNet(TINY_GPT, above=above).eval()
    n = TINY_GPT.num_image_tokens
    tokens = torch.randint(0, TINY_GPT.vocab_size, (1, n))  # (1, N)
    features = torch.randn(1, 1 + n, TINY_GPT.dim)  # (1, 1 + N, D)
    with torch.no_grad():
        depth1, depth2 = training_forward(net, target, tokens, features, 0.0, None, depth=2)
        assert depth1.shape == (1, n, TINY_GPT.dim) and depth2.shape == (1, n - 1, TINY_GPT.dim)
        for t in (0, 3, 4, n - 2):
            first, second = _drafting_view(net, target, tokens, features, t)
            torch.testing.assert_close(depth1[0, t], first, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(depth2[0, t], second, rtol=1e-5, atol=1e-5)


def test_unrolled_mask_shows_each_draft_its_prefix_and_its_chain():
    mask = unrolled_mask(4, 3)  # blocks of 4, 3 and 2 rows
    assert mask.shape == (9, 9)
    assert mask[:4, :4].equal(torch.ones(4, 4, dtype=torch.bool).tril()) and not mask[:4, 4:].any()
    # Block 2, row 1 (x_3 drafted two steps after true pair 1): true pairs 0, 1 and its chain.
    assert mask[8].nonzero().flatten().tolist() == [0, 1, 5, 8]


def test_above_embeddings_are_the_token_one_row_above_the_predicted_one():
    target = tiny_gpt()
    grid = TINY_GPT.grid_size
    tokens = torch.arange(TINY_GPT.num_image_tokens)[None]  # (1, N): token i at position i
    above = above_embeddings(target, tokens)  # (1, N, D)
    assert above[0, : grid - 1].abs().sum() == 0  # the pairs that predict the first row
    torch.testing.assert_close(above[0, grid - 1], target.embed_tokens(tokens[:, 0])[0])
    torch.testing.assert_close(above[0, -1], target.embed_tokens(tokens[:, -grid])[0])


@pytest.mark.parametrize("committed", [3, TINY_GPT.grid_size, 2 * TINY_GPT.grid_size + 1])
def test_drafting_reads_the_tokens_above_that_training_read(committed):
    target = tiny_gpt()
    tokens = (torch.arange(TINY_GPT.num_image_tokens) * 7 % TINY_GPT.vocab_size)[None]  # (1, N)
    known = tokens[0, :committed].tolist()
    predicted = range(committed - 2, committed + 2)  # the pairs fed and two tree levels
    drafting = above_for_drafting(target, known, predicted)  # (1, 4, D)
    training = above_embeddings(target, tokens)[:, [p - 1 for p in predicted]]  # pair j predicts j + 1
    torch.testing.assert_close(drafting, training, rtol=0, atol=0)


@pytest.mark.parametrize("above", [False, True])
def test_the_drafter_drafts_with_what_training_showed_it(above):
    """The tree's draft probabilities at depth 1 and 2 are the guided distributions of the training
    view, so the token-above input and fed-back features line up in both."""
    target = tiny_gpt()
    torch.manual_seed(2)
    net = EagleNet(TINY_GPT, above=above).eval()
    n, t = TINY_GPT.num_image_tokens, TINY_GPT.grid_size + 2  # the tree grows after x_t
    tokens = torch.randint(0, TINY_GPT.vocab_size, (n,))  # (N,)
    rows = torch.tensor([1, target.null_class])  # CFG's two rows
    feats = sequence_features(target, rows, tokens.expand(2, -1)).clone()  # (2, 1 + N, D)
    sampling = SamplingConfig(temperature=1.0, cfg_scale=4.0)
    state = DecodeState(target=target, class_id=1, rows=2, sampling=sampling, rule=ExactRule().bind(sampling),
                        generator=torch.Generator(),
                        tokens=tokens[: t + 1].tolist(), num_tokens=n)
    drafter = EagleDrafter(net, TreeConfig(depth=2, top_k=2, total_tokens=7, min_score=0.0))
    drafter.reset(state, feats[:, :1])
    drafter.pending_features = feats[:, : t + 1]  # as if the target had confirmed x_0 .. x_t at once
    tree = drafter.propose(state, int(tokens[t]), max_depth=2)

    def guided_q(sequence: torch.Tensor, depth: int) -> torch.Tensor:
        with torch.no_grad():
            pred = training_forward(net, target, sequence.expand(2, -1), feats, 0.0, None, depth)[-1][:, t]
            return target.logits(combine_cfg(pred[:, None], 4.0)).softmax(-1)[0]  # (V,)

    first = guided_q(tokens, 1)
    for node in range(1, tree.size):
        token = int(tree.tokens[node])
        if tree.depths[node] == 1:
            expected = first[token]
        else:  # its parent's token stands at x_{t+1}
            drafted = tokens.clone()
            drafted[t + 1] = tree.tokens[tree.parents[node]]
            expected = guided_q(drafted, 2)[token]
        torch.testing.assert_close(tree.q[node].item(), expected.item(), rtol=1e-4, atol=1e-6)
    assert (tree.depths == 2).sum() == 4



@pytest.mark.parametrize("method", ["lantern", "lantern_static"])
def test_a_drafter_reading_the_token_above_drafts_at_most_one_grid_row_ahead(tiny_model, method):
    """Deeper than a row, the token above a draft is itself undrafted: the tree stops there."""
    from engine.drafters.static_tree import chain
    from engine.generation import stream
    from engine.methods import MethodOptions

    tiny_model.drafters["eagle"] = EagleNet(TINY_GPT, above=True).eval()
    deep = 16  # four rows of the tiny model's grid
    options = MethodOptions(delta=1.0, k=8, static_tree=chain(deep),
                            tree=TreeConfig(depth=deep, total_tokens=deep + 1, min_score=0.0))
    traces = list(stream(tiny_model, method, SamplingConfig(temperature=0.0), 0, options))
    assert sum(len(t.new_tokens) for t in traces) == TINY_GPT.num_image_tokens
    assert max(int(t.tree_depths.max()) for t in traces) == TINY_GPT.grid_size
