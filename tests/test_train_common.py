"""The training loop every command shares: resumable, checkpointed, saving on schedule."""
import pytest
import torch

from engine.train.common import cosine_lr, fit


class Interrupted(Exception):
    pass


def _run(checkpoint, steps: int, saved: list[int], lead: bool = True, stop_at: int = -1) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3)  # (N, 3)
    y = x.sum(-1, keepdim=True)  # (N, 1)

    def train_step(step: int) -> str:
        if step == stop_at:
            raise Interrupted
        index = torch.randint(0, len(x), (4,), generator=gen)
        loss = (model(x[index]) - y[index]).pow(2).mean()
        loss.backward()
        return f"loss {loss.item():.3f}"

    fit(model, optimizer, gen, checkpoint, steps=steps, lr=0.1, warmup=2, train_step=train_step, clip=1.0,
        save_every=3, save=saved.append, lead=lead)
    return model


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    saved_whole, saved_parts = [], []
    whole = _run(tmp_path / "whole" / "checkpoint.pt", 7, saved_whole)
    with pytest.raises(Interrupted):  # killed in its fifth step, after the checkpoint at step 3
        _run(tmp_path / "parts" / "checkpoint.pt", 7, saved_parts, stop_at=4)
    parts = _run(tmp_path / "parts" / "checkpoint.pt", 7, saved_parts)
    assert saved_whole == [3, 6, 7] and saved_parts == [3, 6, 7]
    for a, b in zip(whole.parameters(), parts.parameters()):
        assert torch.equal(a, b)


def test_only_the_lead_process_saves(tmp_path):
    saved = []
    _run(tmp_path / "checkpoint.pt", 3, saved, lead=False)
    assert saved == [] and not (tmp_path / "checkpoint.pt").exists()


def test_a_run_from_committed_weights_warms_its_rate_up_again(tmp_path):
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    rates = []

    def train_step(step: int) -> str:
        rates.append(optimizer.param_groups[0]["lr"])
        model(torch.ones(1, 3)).sum().backward()
        return ""

    fit(model, optimizer, torch.Generator(), tmp_path / "checkpoint.pt", steps=20, lr=0.1, warmup=4,
        train_step=train_step, start=10)
    scheduled = [cosine_lr(step, 20, 0.1, 4) for step in range(10, 20)]
    assert rates[:4] == pytest.approx([scheduled[i] * (i + 1) / 4 for i in range(4)])
    assert rates[4:] == pytest.approx(scheduled[4:])


def test_a_stopped_run_follows_the_whole_schedule_and_saves_where_it_stops(tmp_path):
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    rates, saved = [], []

    def train_step(step: int) -> str:
        rates.append(optimizer.param_groups[0]["lr"])
        model(torch.ones(1, 3)).sum().backward()
        return ""

    reached = fit(model, optimizer, torch.Generator(), tmp_path / "checkpoint.pt", steps=20, lr=0.1, warmup=4,
                  train_step=train_step, save_every=5, save=saved.append, stop=12)
    assert reached == 12 and saved == [5, 10, 12]
    assert rates == pytest.approx([cosine_lr(step, 20, 0.1, 4) for step in range(12)])
