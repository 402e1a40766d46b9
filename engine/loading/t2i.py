"""Text-to-image LlamaGen: a caption prefix instead of a class token.

The caption is up to 120 FLAN-T5 token features (2048 wide) projected by a two-layer MLP
(`cls_embedding.cap_proj`); CFG's null condition is the learned buffer
`cls_embedding.uncond_embedding` (120, 2048). LlamaGen left-pads the caption to 120 tokens and masks
the padding out of attention, for the null row as well (so the null row sees the last n rows of the
buffer). Condition positions are rotated by cos = sin = 0, so their queries and keys are zero and
their place in the sequence does not matter: a prefix of only the n real tokens, with image tokens
still rotated by their own grid cell, computes what the padded and masked prefix computes.
`PromptTarget` binds the model to one prompt that way (`TextImageModel.bind`), so the decoding loop
runs a text-to-image model as a one-class model: class 0 is the prompt, class 1 the null condition.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.config import InvalidInput
from engine.loading.image_model import ImageModel
from engine.loading.text_encoder import TextEncoder
from engine.model.gpt import GPT, GPTConfig, rope_table_2d
from engine.model.tokenizer import VQModel

CAPTION_TOKENS = 120  # LlamaGen's cls_token_num for text-to-image
CAPTION_DIM = 2048  # FLAN-T5-XL's width
CACHED_CAPTIONS = 32  # encoded prompts kept per model


class CaptionMLP(nn.Module):
    def __init__(self, caption_dim: int, dim: int):
        super().__init__()
        self.fc1 = nn.Linear(caption_dim, dim, bias=False)
        self.fc2 = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class CaptionEmbedder(nn.Module):
    uncond_embedding: torch.Tensor  # a buffer: (tokens, caption_dim), the null condition's caption

    def __init__(self, caption_dim: int, dim: int, tokens: int):
        super().__init__()
        self.cap_proj = CaptionMLP(caption_dim, dim)
        self.register_buffer("uncond_embedding", torch.zeros(tokens, caption_dim))

    def forward(self, captions: torch.Tensor) -> torch.Tensor:
        return self.cap_proj(captions)  # (B, T, C) -> (B, T, D)


def text_gpt(cfg: GPTConfig, caption_dim: int = CAPTION_DIM) -> GPT:
    """A text-to-image GPT; cfg.cls_token_num is the caption length (120 for LlamaGen)."""
    return GPT(cfg, condition=CaptionEmbedder(caption_dim, cfg.dim, cfg.cls_token_num))


class PromptPrefix(nn.Module):
    """Class 0 -> the prompt's projected caption, class 1 -> the null condition's; (R, n, D)."""

    table: torch.Tensor  # a buffer, registered below

    def __init__(self, cond: torch.Tensor, null: torch.Tensor):
        super().__init__()
        self.register_buffer("table", torch.stack([cond, null]), persistent=False)  # (2, n, D)

    def forward(self, class_ids: torch.Tensor) -> torch.Tensor:
        return self.table[class_ids]  # (R, n, D)


class PromptTarget(GPT):
    """A text-to-image GPT bound to one prompt; it shares every weight with the full model."""

    def __init__(self, model: GPT, caption: torch.Tensor):
        """caption (n, C): FLAN-T5 features of the prompt's n real tokens, padding removed."""
        # GPT.__init__ would allocate a second set of weights: attach the model's modules instead.
        nn.Module.__init__(self)
        n = caption.shape[0]
        if not 1 <= n <= model.cfg.cls_token_num:
            raise InvalidInput(f"caption has {n} tokens; allowed: 1 to {model.cfg.cls_token_num}")
        self.cfg = replace(model.cfg, cls_token_num=n, num_classes=1)
        self.tok_embeddings, self.layers = model.tok_embeddings, model.layers
        self.norm, self.output = model.norm, model.output
        weight = model.output.weight
        embedder = cast(CaptionEmbedder, model.cls_embedding)  # a text GPT's, as text_gpt builds it
        with torch.no_grad():
            cond = embedder(caption[None].to(weight))[0]  # (n, D)
            null = embedder(embedder.uncond_embedding[-n:][None].to(weight))[0]  # (n, D)
        self.cls_embedding = PromptPrefix(cond, null)
        cfg = self.cfg
        rope = rope_table_2d(cfg.grid_size, cfg.head_dim, cfg.rope_base, n).to(weight.device)
        self.register_buffer("rope", rope, persistent=False)
        self._rotations, self._rotations_key = None, None  # as GPT.__init__ sets them


@dataclass
class TextImageModel:
    """A text-to-image GPT, its tokenizer and its text encoder; `bind(prompt)` gives a runnable model."""

    target: GPT
    tokenizer: VQModel
    encoder: TextEncoder
    name: str
    drafters: dict[str, nn.Module] = field(default_factory=dict)
    _neighbour_tables: dict = field(default_factory=dict, repr=False)
    _captions: dict = field(default_factory=dict, repr=False)  # prompt -> (n, C), the latest few

    @property
    def needs_prompt(self) -> bool:
        """True: the condition is a caption, bound with `bind`."""
        return True

    @property
    def grid_size(self) -> int:
        return self.target.cfg.grid_size

    def unbound(self) -> ImageModel:
        """The model before a prompt is chosen, for what needs no caption: which drafters exist,
        neighbour tables."""
        return self._image_model(self.target, "")

    def to(self, device: str | torch.device, dtype: torch.dtype | None = None,
           product_dtype: torch.dtype | None = None) -> TextImageModel:
        """The GPT and drafters to `device` in `dtype` (products in `product_dtype`), the text encoder
        to `device`; the VQ decoder and the text encoder stay float32."""
        self.unbound().to(device, dtype, product_dtype)  # it shares the GPT, tokenizer and drafters
        self.encoder.to(device)
        return self

    def bind(self, prompt: str | None) -> ImageModel:
        """A runnable model for `prompt`: one class, index 0, named by the prompt."""
        prompt = str(prompt or "").strip()
        if not prompt:
            raise InvalidInput(f"model {self.name!r} draws from a caption; write a prompt")
        # Encoding costs a pass of a 1.2B-parameter encoder; runs that only change delta or k reuse it.
        if prompt not in self._captions:
            if len(self._captions) >= CACHED_CAPTIONS:
                self._captions.pop(next(iter(self._captions)))
            self._captions[prompt] = self.encoder.encode(prompt)  # (n, C)
        return self._image_model(PromptTarget(self.target, self._captions[prompt]), prompt)

    def _image_model(self, target: GPT, prompt: str) -> ImageModel:
        # The neighbour tables depend on the codebook only, so every prompt shares them.
        return ImageModel(target, self.tokenizer, (prompt,), name=self.name, drafters=self.drafters,
                          _neighbour_tables=self._neighbour_tables)
