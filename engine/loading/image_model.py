"""A runnable image model: a target GPT, the tokenizer that draws its tokens, and its drafters."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.core.config import InvalidInput, check_class_id
from engine.model.gpt import GPT
from engine.model.matmul import multiply_in
from engine.model.tokenizer import VQModel
from engine.rules.neighbours import neighbour_table


def place(module: torch.nn.Module, device: str | torch.device, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Move a model to `device` (and cast it to `dtype`), keeping RoPE tables in fp32 as LlamaGen
    does (its freqs_cis is not a buffer, so a bf16 cast leaves it alone)."""
    module.to(device=device, dtype=dtype)
    for sub in module.modules():
        if isinstance(sub, GPT):
            sub.rope = sub.rope.float()
    return module


@dataclass
class ImageModel:
    """A target GPT with the tokenizer that turns its tokens into pictures, conditioned on a class
    (a text-to-image model bound to one prompt is an ImageModel whose one class is that prompt)."""

    target: GPT
    tokenizer: VQModel
    class_names: tuple[str, ...]
    name: str
    drafters: dict[str, torch.nn.Module] = field(default_factory=dict)  # "eagle", "medusa", "sps"
    _neighbour_tables: dict = field(default_factory=dict, repr=False)

    @property
    def needs_prompt(self) -> bool:
        """False: the condition is a class, chosen for each image."""
        return False

    def bind(self, condition: str | int | None = None) -> ImageModel:
        """The model ready to decode: itself, since a class model takes its class per image
        (`class_id` reads and checks it)."""
        return self

    def unbound(self) -> ImageModel:
        """The model before a condition is chosen: itself."""
        return self

    def to(self, device: str | torch.device, dtype: torch.dtype | None = None,
           product_dtype: torch.dtype | None = None) -> ImageModel:
        """The GPT and drafters to `device` in `dtype`, their matrix products in `product_dtype`
        (None: in `dtype`); the VQ decoder stays float32."""
        self.tokenizer.to(device)
        for module in [self.target, *self.drafters.values()]:
            place(module, device, dtype)
            multiply_in(module, product_dtype)
        return self

    def drafter_net(self, kind: str, method: str) -> torch.nn.Module:
        if kind not in self.drafters:
            have = ", ".join(self.drafters) or "none"
            raise InvalidInput(f"method {method!r} needs a trained {kind} drafter, which model "
                               f"{self.name!r} does not have (it has: {have})")
        return self.drafters[kind]

    @property
    def grid_size(self) -> int:
        return self.target.cfg.grid_size

    def class_id(self, name_or_id: str | int) -> int:
        """A class index from an index or a class name; anything else is an InvalidInput."""
        if isinstance(name_or_id, str):
            if name_or_id in self.class_names:
                return self.class_names.index(name_or_id)
            try:
                name_or_id = int(name_or_id)
            except ValueError:
                raise InvalidInput(f"unknown class {name_or_id!r}; allowed: a class index or one of "
                                   f"{', '.join(self.class_names)}") from None
        return check_class_id(int(name_or_id), self.target.cfg.num_classes)

    def neighbours(self, k: int, metric: str = "l2"):
        """LANTERN's (V, k) neighbour table for this tokenizer's codebook, computed once per k, or
        taken as the first k columns of a wider table already computed (nearest first either way), so
        that trying many k costs one computation. A table once given for k is the one given again."""
        key = (k, metric)
        if key not in self._neighbour_tables:
            wider = [table for (columns, kind), table in self._neighbour_tables.items()
                     if kind == metric and columns > k]
            if wider:
                self._neighbour_tables[key] = min(wider, key=lambda table: table.shape[1])[:, :k]
            else:
                self._neighbour_tables[key] = neighbour_table(self.tokenizer.quantize.codebook(), k, metric)
        return self._neighbour_tables[key]

    @torch.no_grad()
    def decode_images(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, grid^2) -> uint8 images (B, H, W, 3)."""
        images = self.tokenizer.decode(tokens.to(torch.long), self.grid_size)  # (B, 3, H, W)
        return ((images + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
