"""Loading the embedded model family from assets/ into ready-to-run modules."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.config import InvalidInput, check_class_id
from engine.embedded import ASSETS, EAGLE_FILE, MEDUSA_FILE, SPS_FILE, TARGET_FILE, TOKENIZER_FILE
from engine.gpt import GPT, GPTConfig
from engine.tokenizer import VQConfig, VQModel
from engine.weights import config_from_metadata, load_state, load_strict


def load_module(path: Path, config_type: type, module_type: type) -> torch.nn.Module:
    """Build `module_type(config)` from the config stored in the file and load its tensors strictly."""
    config = config_from_metadata(path, config_type)
    module = module_type(config)
    load_strict(module, load_state(path), str(path))
    return module.eval()


def load_embedded_tokenizer(assets: Path = ASSETS) -> VQModel:
    return load_module(assets / TOKENIZER_FILE, VQConfig, VQModel)


def load_embedded_target(assets: Path = ASSETS) -> GPT:
    return load_module(assets / TARGET_FILE, GPTConfig, GPT)


@dataclass
class ImageModel:
    """A target GPT with the tokenizer that turns its tokens into pictures."""

    target: GPT
    tokenizer: VQModel
    class_names: tuple[str, ...]
    name: str
    drafters: dict[str, torch.nn.Module] = field(default_factory=dict)  # "eagle", "medusa", "sps"
    _neighbour_tables: dict = field(default_factory=dict, repr=False)

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
        """LANTERN's (V, k) neighbour table for this tokenizer's codebook, computed once."""
        key = (k, metric)
        if key not in self._neighbour_tables:
            from engine.neighbours import neighbour_table

            codebook = self.tokenizer.quantize.codebook()
            self._neighbour_tables[key] = neighbour_table(codebook, k, metric)
        return self._neighbour_tables[key]

    @torch.no_grad()
    def decode_images(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, grid^2) -> uint8 images (B, H, W, 3)."""
        images = self.tokenizer.decode(tokens.to(torch.long), self.grid_size)  # (B, 3, H, W)
        return ((images + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)


def load_embedded_drafters(assets: Path = ASSETS) -> dict[str, torch.nn.Module]:
    """Every trained drafter shipped in assets/; a method whose drafter is absent is unavailable."""
    from engine.drafters.eagle_net import EagleNet
    from engine.drafters.medusa import MedusaConfig, MedusaHeads

    kinds = {"eagle": (EAGLE_FILE, GPTConfig, EagleNet), "sps": (SPS_FILE, GPTConfig, GPT),
             "medusa": (MEDUSA_FILE, MedusaConfig, MedusaHeads)}
    return {kind: load_module(assets / file, config_type, module_type)
            for kind, (file, config_type, module_type) in kinds.items() if (assets / file).exists()}


def load_embedded(assets: Path = ASSETS) -> ImageModel:
    from engine.dataset import CLASS_NAMES

    return ImageModel(load_embedded_target(assets), load_embedded_tokenizer(assets), CLASS_NAMES,
                      name="embedded", drafters=load_embedded_drafters(assets))


def load_model(name: str = "embedded", weights_dir: Path | None = None, device: str | torch.device = "cpu",
               dtype: torch.dtype | None = None):
    """The model the command line, benchmark and app load by name: the embedded one, or an official
    LlamaGen model (engine.official.MODELS) read from `weights_dir` or the Hugging Face Hub."""
    from engine.official import load_official, place

    if name == "embedded":
        if weights_dir is not None:
            raise InvalidInput("--weights-dir is for official models; the embedded one is read from assets/")
        model = load_embedded()
        model.tokenizer.to(device)
        for module in [model.target, *model.drafters.values()]:
            place(module, device, dtype)
        return model
    return load_official(name, weights_dir, device, dtype)
