"""The EAGLE-2 dynamic tree: rule-aware scores, and pruning that only spares work."""
import numpy as np
import pytest
import torch

from engine.core.config import InvalidInput, SamplingConfig, TreeConfig
from engine.drafters.eagle import EagleDrafter
from engine.generation import generate
from engine.methods import MethodOptions
from engine.rules.acceptance import ExactRule
from engine.rules.lantern import DeltaBound, lantern_rule

Q = torch.tensor([[0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.01, 0.01]])  # (1, V)
V = Q.shape[1]
GREEDY, SAMPLING = SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0)  # the two modes a rule binds to
TABLE = np.array([[(i + j) % V for j in range(1, V)] for i in range(V)])  # neighbours: the next codes


def test_the_exact_rule_scores_a_draft_by_its_draft_probability():
    candidates = torch.tensor([[0, 2, 5]])
    assert ExactRule().bind(SAMPLING).draft_confidence(Q, candidates).tolist() == Q[:, [0, 2, 5]].tolist()


def test_lantern_scores_a_sibling_by_the_chance_it_is_reached_and_passes():
    rule = lantern_rule(TABLE, DeltaBound(0.2), k=3)
    candidates = torch.tensor([[0, 1, 2]])
    # q~ of 0: 0.40 + q(1) 0.25 > 0.2, so no credit -> 0.40; of 1: 0.25 + q(2) 0.15 = 0.40 (0.15 +
    # 0.10 > 0.2); of 2: 0.15 + 0.10 + 0.05 + 0.03 = 0.33.
    relaxed = [0.40, 0.40, 0.33]
    expected = [relaxed[0], (1 - relaxed[0]) * relaxed[1], (1 - relaxed[0]) * (1 - relaxed[1]) * relaxed[2]]
    sampled = rule.bind(SAMPLING).draft_confidence(Q, candidates)[0].tolist()
    assert sampled == pytest.approx(expected)
    # Greedy, judged on the parent's p: x passes when q~(x) beats the best other q; 0 and 1 both
    # do (0.40 >= 0.25, 0.40 >= 0.40), so the second is only needed when the first fails: never.
    greedy = rule.bind(GREEDY).draft_confidence(Q, candidates)[0].tolist()
    assert greedy[0] == pytest.approx(1.0) and greedy[1] == pytest.approx(1e-6)


def test_tree_settings_are_checked():
    with pytest.raises(InvalidInput, match="tree score 'best'"):
        TreeConfig(score="best")
    with pytest.raises(InvalidInput, match="tree min score 1.5"):
        TreeConfig(min_score=1.5)


def _trees(model, options: MethodOptions, method: str, temperature: float) -> tuple[list[tuple], int]:
    """Each pass's tree, and the drafts accepted over the decode."""
    sampling = SamplingConfig(temperature=temperature, seed=3, cfg_scale=2.0)
    traces = generate(model, method, sampling, 1, options).traces[1:]
    return ([(t.tree_tokens.tolist(), t.tree_parents.tolist()) for t in traces],
            sum(len(t.accepted_nodes) for t in traces))


@pytest.mark.parametrize("method,temperature", [("eagle2", 0.0), ("lantern", 0.0), ("lantern", 1.0)])
def test_pruning_the_frontier_leaves_the_tree_unchanged(tiny_accepting, monkeypatch, method, temperature):
    """Without a min score, expanding only the frontier nodes that can still enter the selection
    gives the trees that expanding every frontier node gives: with the trained drafter, whose drafts
    are accepted, so that later trees grow from accepted paths."""
    options = MethodOptions(k=4, tree=TreeConfig(depth=5, top_k=3, total_tokens=6, min_score=0.0))
    pruned, accepted = _trees(tiny_accepting, options, method, temperature)
    assert accepted >= 3
    monkeypatch.setattr(EagleDrafter, "_promising",
                        staticmethod(lambda scores, frontier, budget, least: list(range(len(frontier)))))
    assert _trees(tiny_accepting, options, method, temperature)[0] == pruned


def test_a_min_score_stops_growth_where_acceptance_is_unlikely(tiny_eagle):
    deep = MethodOptions(tree=TreeConfig(depth=6, top_k=2, total_tokens=7, min_score=0.0))
    shallow = MethodOptions(tree=TreeConfig(depth=6, top_k=2, total_tokens=7, min_score=0.9))
    sampling = SamplingConfig(temperature=0.0, cfg_scale=2.0)
    # An untrained drafter is unsure everywhere: at 0.9 no node is worth a second level.
    depths = [int(t.tree_depths.max()) for t in generate(tiny_eagle, "eagle2", sampling, 1, shallow).traces[1:]]
    assert max(depths) == 1
    full = [int(t.tree_depths.max()) for t in generate(tiny_eagle, "eagle2", sampling, 1, deep).traces[1:]]
    assert max(full) > 1
