"""The EAGLE drafter network: one Llama block over (token embedding, target feature) pairs.

Input at image position t is concat(embed(x_t), f_{t-1}), where f_{t-1} is the target's final-normed
hidden state at the position before (the one that predicted x_t). The output estimates f_t, and the
target's own LM head turns it into a distribution over x_{t+1}. The embedding and the head are the
target's, frozen and not stored with the drafter.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from engine.model.gpt import GPT, GPTConfig, Rotation, TransformerBlock
from engine.model.kv_cache import KVCache
from engine.model.matmul import weight_state
from engine.model.target import Target
from engine.model.weights import config_from_metadata, load_state, load_strict, read_metadata


class EagleNet(nn.Module):
    """Configured by the target's own GPTConfig: its block has the target's width and heads.

    With `above`, each pair also sees the embedding of the token one grid row above the token it
    predicts (zero on the first row): image rows repeat, and that token is always committed.
    """

    def __init__(self, cfg: GPTConfig, above: bool = False):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(2 * cfg.dim, cfg.dim, bias=True)
        self.fc_above = nn.Linear(cfg.dim, cfg.dim, bias=False) if above else None
        # [fc | fc_above] for drafting, and the weight_state of the weights it was built from
        self._joined: torch.Tensor | None = None
        self._joined_key: tuple[tuple[int, int], ...] | None = None
        self.layer = TransformerBlock(cfg)
        # EAGLE's block has no input norm: the fused features enter attention as they are.
        self.layer.attention_norm = nn.Identity()

    def forward(self, token_embeddings: torch.Tensor, features: torch.Tensor, rope: torch.Tensor | Rotation,
                cache: KVCache | None, slots: torch.Tensor | None, mask: torch.Tensor,
                above_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """token_embeddings, features, above_embeddings (R, T, D) -> predicted next features (R, T, D)."""
        if self.fc_above is None:
            h = self.fc(torch.cat([token_embeddings, features], dim=-1))  # (R, T, D)
        elif torch.is_grad_enabled():
            h = self.fc(torch.cat([token_embeddings, features], dim=-1)) + self.fc_above(above_embeddings)
        else:  # one product instead of two and a sum: drafting makes several small calls a step
            assert above_embeddings is not None, "a drafter with fc_above reads the tokens above"
            inputs = torch.cat([token_embeddings, features, above_embeddings], dim=-1)  # (R, T, 3D)
            h = torch.addmm(self.fc.bias, inputs.flatten(0, 1), self._joined_input_weight(self.fc_above).t())
            h = h.view(*inputs.shape[:2], -1)  # (R, T, D)
        return self.layer.forward(h, rope, 0, cache, slots, mask)  # no hooks: skip Module.__call__

    def _joined_input_weight(self, fc_above: nn.Linear) -> torch.Tensor:
        """[fc | fc_above] as one (D, 3D) weight, rebuilt when either changes."""
        parts = (self.fc.weight, fc_above.weight)
        key = tuple(weight_state(w) for w in parts)
        joined = self._joined
        if joined is None or self._joined_key != key:
            joined = torch.cat([w.detach() for w in parts], dim=1)  # (D, 3D)
            self._joined, self._joined_key = joined, key
        return joined

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        cfg = self.cfg
        weight = self.fc.weight
        return KVCache(1, rows, cfg.n_head, capacity, cfg.head_dim, dtype=weight.dtype, device=weight.device)


def load_eagle_net(path: Path) -> EagleNet:
    """A drafter file written by engine.train: the target's config and, in the metadata, whether it
    takes the token above (files without the key, such as older ones, do not)."""
    net = EagleNet(config_from_metadata(path, GPTConfig), above=bool(read_metadata(path).get("above", False)))
    load_strict(net, load_state(path), str(path))
    return net.eval()


def unrolled_mask(n: int, depth: int) -> torch.Tensor:
    """Attention mask (S, S), S = n + (n - 1) + ... + (n - depth + 1), of `depth` blocks of pairs.

    Block 0 holds the n teacher-forced pairs, causal. Block b > 0, row t is the pair drafted b steps
    after true pair t: it sees the true pairs 0..t and its own chain (row t of blocks 1..b), as a
    depth-b node of an EAGLE-2 tree sees the committed prefix and its ancestors.
    """
    sizes = torch.tensor([n - b for b in range(depth)])
    block = torch.repeat_interleave(torch.arange(depth), sizes)  # (S,)
    row = torch.cat([torch.arange(int(s)) for s in sizes])  # (S,)
    qb, kb, qr, kr = block[:, None], block[None, :], row[:, None], row[None, :]
    return ((kb == 0) & (kr <= qr)) | ((kb > 0) & (kb <= qb) & (kr == qr))


def training_forward(net: EagleNet, target: GPT, tokens: torch.Tensor, features: torch.Tensor,
                     noise: float, gen: torch.Generator | None, depth: int = 1) -> list[torch.Tensor]:
    """Drafter features for whole sequences, teacher-forced and fed back on their own predictions.

    tokens (B, N) image tokens; features (B, 1 + N, D) target features at the condition position and
    every image position. Returns one tensor per draft depth d = 1..depth, (B, N - d + 1, D): row t
    predicts f_{t+d-1}. Depth 1 pairs token x_t with the true f_{t-1}; depth d > 1 pairs x_{t+d-1}
    with the drafter's own depth d - 1 prediction, as drafting a tree does. The fed-back features
    come from gradient-free passes; only the last depth's pass keeps a graph.
    """
    prev = features[:, :-1]  # (B, N, D)
    if noise > 0:
        prev = prev + (torch.rand(prev.shape, generator=gen).to(prev.device) * 2 - 1) * noise
    n = tokens.shape[1]
    cls = target.cfg.cls_token_num
    emb = target.embed_tokens(tokens)  # (B, N, D)
    embs = [emb[:, b:] for b in range(depth)]  # block b, row t: token x_{t+b}
    above = above_embeddings(target, tokens)  # (B, N, D)
    aboves = [above[:, b:] for b in range(depth)]
    positions = torch.cat([cls + b + torch.arange(n - b) for b in range(depth)])  # x_{t+b} at cls + t + b
    fed = [prev]
    for d in range(1, depth + 1):
        size = sum(n - b for b in range(d))
        mask = unrolled_mask(n, d).to(emb.device)  # (size, size)
        args = (torch.cat(embs[:d], 1), torch.cat(fed, 1), target.rope[positions[:size]], None, None, mask,
                torch.cat(aboves[:d], 1))
        if d < depth:
            with torch.no_grad():
                out = net(*args)  # (B, size, D)
            fed.append(out[:, size - (n - d + 1):][:, : n - d])  # the last block's rows 0..n-d-1
        else:
            out = net(*args)  # (B, size, D)
    starts = [sum(n - b for b in range(d)) for d in range(depth + 1)]
    return [out[:, starts[d]:starts[d + 1]] for d in range(depth)]


def above_embeddings(target: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """tokens (B, N) of whole sequences -> (B, N, D): at pair j, the embedding of x_{j+1-grid}, the
    token above the one pair j predicts, or zeros where that is above the first row."""
    index = torch.arange(tokens.shape[1], device=tokens.device) + 1 - target.cfg.grid_size  # (N,)
    emb = target.embed_tokens(tokens[:, index.clamp(min=0)])  # (B, N, D)
    return emb * (index >= 0).to(emb.dtype)[None, :, None]


def above_for_drafting(target: Target, known: list[int], predicted: range) -> torch.Tensor:
    """Embeddings (1, T, D) of the committed tokens `known` one grid row above the image positions
    `predicted` (T ascending) (zeros above the first row), as above_embeddings gives them in training.
    From Python ints: a step drafts from a few positions, and tensor indexing costs more than lists."""
    grid = target.cfg.grid_size
    above = [known[p - grid] if p >= grid else 0 for p in predicted]
    emb = target.embed_tokens(torch.tensor([above], device=target.output.weight.device))  # (1, T, D)
    on_first_row = sum(p < grid for p in predicted)
    if on_first_row:
        emb[:, :on_first_row] = 0.0
    return emb
