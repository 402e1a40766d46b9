"""Standard speculative sampling: a small separate GPT drafts a chain of gamma tokens.

The draft model is a LlamaGen-architecture GPT of its own (same tokenizer, same classes) with its
own cache; drafting samples from its CFG-guided distribution with the target's sampling settings.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.core.sampling import combine_cfg, distribution, pick
from engine.core.tree import DraftTree
from engine.drafters.base import DecodeState, Drafter
from engine.model.gpt import GPT
from engine.model.kv_cache import KVCache


class SpsDrafter(Drafter):
    def __init__(self, draft: GPT, gamma: int):
        self.draft, self.gamma = draft, gamma

    def largest_tree(self) -> int:
        return self.gamma + 1

    def reset(self, state: DecodeState, prefix_hidden: torch.Tensor) -> None:
        cfg = self.draft.cfg
        device = self.draft.output.weight.device
        self.cache = KVCache.for_model(cfg, state.rows, cfg.block_size + 1, self.draft.output.weight.dtype,
                                       device)
        ids = torch.tensor([state.class_id, self.draft.null_class][: state.rows], device=device)
        prefix = self.draft.embed_condition(ids)  # (R, P, D)
        self.seen = prefix.shape[1]  # sequence entries in the draft cache
        self.last_hidden = self._forward(prefix, self.seen)

    def _forward(self, h: torch.Tensor, length: int) -> torch.Tensor:
        """Append h (R, T, D) at sequence positions length - T .. length - 1; return last hidden."""
        T = h.shape[1]
        device = h.device
        positions = torch.arange(length - T, length, device=device)
        mask = torch.ones(T, length, dtype=torch.bool, device=device).tril(length - T)
        return self.draft(h, positions, self.cache, positions, mask)[:, -1:]  # (R, 1, D)

    def propose(self, state: DecodeState, root: int, max_depth: int) -> DraftTree:
        # Catch up on the tokens accepted since the draft model last looked (the root included).
        prefix_len = self.draft.cfg.cls_token_num
        unseen = state.tokens[self.seen - prefix_len:]
        self.seen += len(unseen)
        hidden = self._forward(self.draft.embed_tokens(self._rows(state, unseen)), self.seen)
        tokens, q, dists = [root], [1.0], []
        uniforms = torch.rand(self.gamma, generator=state.generator, dtype=torch.float64).numpy()
        for i in range(min(self.gamma, max_depth)):
            if i > 0:  # the drafted token goes in after the committed ones; overwritten if rejected
                hidden = self._forward(self.draft.embed_tokens(self._rows(state, tokens[-1:])), self.seen + i)
            logits = combine_cfg(self.draft.logits(hidden), state.sampling.cfg_scale)  # (1, V)
            dist = distribution(logits, state.sampling)[0].cpu().numpy()  # (V,)
            token = pick(dist, uniforms[i], state.sampling.greedy)
            tokens.append(token)
            q.append(float(dist[token]))
            dists.append(dist)
        vocab = self.draft.cfg.vocab_size
        q_dists = np.stack([np.full(vocab, 1.0 / vocab)] + dists)  # (1 + gamma, V), row 0 unused
        return DraftTree.chain(torch.tensor(tokens), torch.tensor(q, dtype=torch.float64),
                               torch.from_numpy(q_dists))

    def _rows(self, state: DecodeState, tokens: list[int]) -> torch.Tensor:
        device = self.draft.output.weight.device
        return torch.tensor(tokens, device=device).expand(state.rows, -1)  # (R, T)
