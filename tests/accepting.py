"""Tiny models whose drafts the target accepts, for the lossless-under-greedy tests.

On the suite's untrained tiny models nearly every draft is rejected, and then every token is the
target's own argmax: "equals vanilla" holds whatever the accepted-draft path does (the cache kept
for it, the tokens read from it). The models here make drafts pass, so that those tests exercise it:

  - trained_eagle: an EAGLE net trained a few dozen steps on the tiny target's own greedy images
    (the three classes, at the CFG scales the tests use): it has memorised them, as a real drafter
    learns a target's likely continuations.
  - noisy_copy: an SpS draft model that is the target with its weights perturbed: its argmax agrees
    with the target's often, not always, so chains are accepted in part and rejections still occur.
  - jacobi_target: a tiny target trained on one fixed image per class, from inputs half of whose
    tokens are replaced at random: it predicts each token from the class, its position and the
    tokens before it, but a wrong token before it rarely changes its guess, as an image model's
    guesses often survive a wrong neighbour. SJD's guesses from an earlier pass are then right.

Each test also asserts a least number of accepted drafts (`assert_lossless`), so that it fails if
acceptance silently stops.
"""
from __future__ import annotations

import copy

import torch

from engine.core.config import SamplingConfig
from engine.drafters.eagle_net import EagleNet
from engine.generation import Generation
from engine.model.gpt import GPT
from engine.train.drafter import drafter_loss
from engine.train.features import sample_with_features


def accepted_drafts(result: Generation) -> int:
    """Drafted tokens the target accepted over a whole decode."""
    return sum(len(t.accepted_nodes) for t in result.traces)


def assert_lossless(fast: Generation, vanilla: Generation, least: int) -> int:
    """`fast` drew vanilla's tokens with at least `least` drafts accepted, each of which saved a
    target pass; returns the count."""
    accepted = accepted_drafts(fast)
    assert fast.tokens.tolist() == vanilla.tokens.tolist(), f"{accepted} drafts accepted"
    assert accepted >= least, f"only {accepted} drafts accepted, expected at least {least}"
    # A pass yields its accepted drafts and one token of its own, except that the image may end
    # with the last accepted draft: so passes saved = accepted, or one fewer.
    assert vanilla.steps - fast.steps in (accepted, accepted - 1), (vanilla.steps, fast.steps, accepted)
    return accepted


def trained_eagle(target: GPT, steps: int = 40, cfg_scales: tuple[float, ...] = (2.0, 4.0)) -> EagleNet:
    """An EAGLE net trained on the target's greedy images of every class (a second or two)."""
    cfg = target.cfg
    ids = torch.arange(cfg.num_classes)
    batches = []
    for scale in cfg_scales:
        out = sample_with_features(target, ids, SamplingConfig(0.0, cfg_scale=scale), torch.Generator())
        # The cond rows, then the null rows, as the guided loss reads them.
        batches.append((scale, out["tokens"].repeat(2, 1), torch.cat([out["cond"], out["null"]]).clone()))
    torch.manual_seed(0)
    net = EagleNet(cfg)
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for step in range(steps):
        scale, tokens, feats = batches[step % len(batches)]
        loss, _ = drafter_loss(net, target, tokens, feats, 0.0, generator, guided=1.0, cfg_scale=scale)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return net.eval()


def noisy_copy(target: GPT, noise: float = 0.2, seed: int = 3) -> GPT:
    """The target with Gaussian noise of `noise` times each weight tensor's spread added."""
    draft = copy.deepcopy(target)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for weight in draft.parameters():
            weight.add_(torch.randn(weight.shape, generator=generator) * noise * weight.std())
    return draft.eval()


def jacobi_target(model: GPT, steps: int = 60, corrupt: float = 0.5, batch: int = 12) -> GPT:
    """`model` trained in place on one random image per class, from inputs whose tokens are each
    replaced by a random one with probability `corrupt` (two seconds)."""
    cfg = model.cfg
    n, vocab = cfg.num_image_tokens, cfg.vocab_size
    generator = torch.Generator().manual_seed(0)
    images = torch.stack([torch.randperm(vocab, generator=generator)[:n] for _ in range(cfg.num_classes)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        classes = torch.arange(batch) % cfg.num_classes
        truth = images[classes]  # (B, N)
        noisy = torch.where(torch.rand(batch, n, generator=generator) < corrupt,
                            torch.randint(0, vocab, (batch, n), generator=generator), truth)
        logits = model.training_logits(classes, noisy)  # (B, N, V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), truth.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()
