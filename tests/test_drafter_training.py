"""Drafter training data and measurements on tiny random models: self-sampled sequences with their
features, the CFG-guided loss, held-out agreement, and drafter files that say their inputs."""
import dataclasses

import pytest
import torch

from engine.core.config import SamplingConfig
from engine.drafters.eagle_net import EagleNet, load_eagle_net
from engine.generation import generate
from engine.loading.embedded import EAGLE_FILE, load_embedded_drafters
from engine.model.weights import save_model
from engine.train.agreement import agreement
from engine.train.drafter import batch_split, drafter_loss, initial_drafter
from engine.train.features import sample_with_features, sequence_features
from tests.conftest import TINY_GPT, tiny_gpt


def _samples(count: int = 3, temperature: float = 1.0) -> dict[str, torch.Tensor]:
    return sample_with_features(tiny_gpt(), torch.arange(count) % TINY_GPT.num_classes,
                                SamplingConfig(temperature, cfg_scale=3.0), torch.Generator().manual_seed(0))


def test_greedy_self_sampling_gives_vanilla_greedy_tokens(tiny_model):
    out = _samples(temperature=0.0)
    for class_id in range(3):
        vanilla = generate(tiny_model, "vanilla", SamplingConfig(temperature=0.0, cfg_scale=3.0), class_id)
        assert out["tokens"][class_id].tolist() == vanilla.tokens.tolist()


def test_sampled_features_are_those_of_the_sampled_tokens():
    out = _samples()
    target = tiny_gpt()
    ids = torch.arange(3) % TINY_GPT.num_classes
    torch.testing.assert_close(out["cond"], sequence_features(target, ids, out["tokens"]), rtol=1e-4, atol=1e-4)
    nulls = torch.full_like(ids, target.null_class)
    torch.testing.assert_close(out["null"], sequence_features(target, nulls, out["tokens"]), rtol=1e-4, atol=1e-4)


def _trained_agreement(guided: float, depth: int, steps: int, noise: float) -> dict[str, float]:
    """Held-in agreement of a tiny drafter trained `steps` steps on four sampled sequences."""
    target = tiny_gpt()
    out = _samples(count=4)
    tokens = out["tokens"].repeat(2, 1)  # (8, N): the cond rows, then the null rows
    feats = torch.cat([out["cond"], out["null"]]).clone()  # (8, 1 + N, D)
    torch.manual_seed(0)
    net = EagleNet(TINY_GPT)
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        loss, _ = drafter_loss(net, target, tokens, feats, noise, gen, guided, 3.0, depth)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    data = {"tokens": out["tokens"].numpy(), "cond": out["cond"].numpy(), "null": out["null"].numpy()}
    return agreement(net.eval(), target, data, cfg_scale=3.0)


def test_the_guided_loss_pulls_the_guided_draft_towards_the_guided_target():
    shares = {guided: _trained_agreement(guided, 1, 30, 0.0)["depth1_top1"] for guided in (0.0, 2.0)}
    assert shares[2.0] > shares[0.0] + 0.05, shares


def test_agreement_counts_top_k_hits_per_depth():
    target = tiny_gpt()
    out = _samples()
    data = {name: value.numpy() for name, value in out.items()}
    shares = agreement(EagleNet(TINY_GPT).eval(), target, data, cfg_scale=3.0, top=(1, 3, TINY_GPT.vocab_size))
    assert set(shares) == ({f"depth{d}_top{k}" for d in (1, 2) for k in (1, 3, TINY_GPT.vocab_size)}
                           | {"depth1_accept", "depth2_accept", "target_top1_prob"})
    for d in (1, 2):
        assert 0 <= shares[f"depth{d}_top1"] <= shares[f"depth{d}_top3"] <= shares[f"depth{d}_top64"] == 1.0
        assert 0 < shares[f"depth{d}_accept"] < 1
    assert 1 / TINY_GPT.vocab_size <= shares["target_top1_prob"] <= 1


@pytest.mark.parametrize("above", [False, True])
def test_drafter_files_say_whether_the_network_reads_the_token_above(tmp_path, above):
    torch.manual_seed(0)
    net = EagleNet(TINY_GPT, above=above)
    save_model(net, tmp_path / EAGLE_FILE, config=TINY_GPT, extra={"trained_steps": 1, "above": above})
    for loaded in (load_eagle_net(tmp_path / EAGLE_FILE), load_embedded_drafters(tmp_path)["eagle"]):
        assert (loaded.fc_above is not None) == above
        for key, value in net.state_dict().items():
            assert torch.equal(loaded.state_dict()[key], value)


def test_an_older_drafter_file_without_the_flag_loads_without_the_input(tmp_path):
    save_model(EagleNet(TINY_GPT), tmp_path / EAGLE_FILE, config=TINY_GPT, extra={"trained_steps": 1})
    assert load_eagle_net(tmp_path / EAGLE_FILE).fc_above is None


def test_batches_draw_the_sampled_share_when_both_kinds_of_sequences_are_used():
    assert batch_split({"real": {}, "sampled": {}}, 8, 0.75) == {"sampled": 6, "real": 2}
    assert batch_split({"real": {}}, 8, 0.75) == {"real": 8}
    assert batch_split({"sampled": {}}, 8, 0.75) == {"sampled": 8}


def test_a_drafter_starts_from_the_one_of_the_target_it_grew_from_when_the_shapes_fit(tmp_path):
    torch.manual_seed(0)
    net = EagleNet(TINY_GPT, above=True)
    save_model(net, tmp_path / EAGLE_FILE, config=TINY_GPT, extra={"trained_steps": 1, "above": True})
    deeper = dataclasses.replace(TINY_GPT, n_layer=4)  # a deepened target: same width and heads
    start = initial_drafter(tmp_path / EAGLE_FILE, deeper)
    assert start.training and start.fc_above is not None
    for key, value in net.state_dict().items():
        assert torch.equal(start.state_dict()[key], value)
    with pytest.raises(SystemExit, match="width 64, heads 4"):
        initial_drafter(tmp_path / EAGLE_FILE, dataclasses.replace(TINY_GPT, dim=128, n_head=8))


def test_training_on_its_own_predictions_brings_the_drafter_closer_at_depth_two():
    accepted = {depth: _trained_agreement(0.0, depth, 100, 0.1)["depth2_accept"] for depth in (1, 2)}
    # sum min(p, q) at depth 2: 0.926 trained on depth 1 alone, 0.938 on both
    assert accepted[2] > accepted[1] + 0.008, accepted
