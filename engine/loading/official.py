"""The official LlamaGen checkpoints: presets, file names, and loading them strictly.

Class-conditional models come from `FoundationVision/LlamaGen` as LlamaGen `.pt` files; their shape
is LlamaGen's preset of the name (B, L, XL, XXL, 3B) and their grid is the image size in the file
name over the tokenizer's downsampling (256 -> 16 x 16, 384 -> 24 x 24). Text-to-image stage I
comes either as LlamaGen's `.pt` (`peizesun/llamagen_t2i`) or as LANTERN's Hugging Face Llama folder
(`jadohu/LlamaGen-T2I`, whose config.json gives the shape) with LANTERN's EAGLE drafter.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from engine.core.config import InvalidInput
from engine.drafters.eagle_net import EagleNet
from engine.loading.hub import resolve_file, resolve_folder
from engine.loading.image_model import ImageModel
from engine.loading.layouts import (
    drop_ignored,
    eagle_to_engine,
    hf_llama_to_llamagen,
    read_hf_folder,
    read_json,
    read_torch_file,
)
from engine.loading.t2i import CAPTION_TOKENS, TextImageModel, text_gpt
from engine.loading.text_encoder import T5_PATTERNS, T5_REPO, T5_REQUIRED, TextEncoder
from engine.model.gpt import GPT, PRESETS, GPTConfig
from engine.model.tokenizer import VQConfig, VQModel
from engine.model.weights import WeightsError, load_module, load_strict

log = logging.getLogger("engine.loading.official")

LLAMAGEN_REPO = "FoundationVision/LlamaGen"
T2I_REPO = "peizesun/llamagen_t2i"
LANTERN_T2I_REPO = "jadohu/LlamaGen-T2I"
LANTERN_DRAFTER_REPO = "jadohu/llamagen_drafter"
HF_PATTERNS = ["*.json", "*.safetensors", "*.bin"]
VOCAB = 16384
IMAGENET_CLASSES = 1000


@dataclass(frozen=True)
class TokenizerSpec:
    repo: str
    filename: str
    config: VQConfig


VQ16 = VQConfig(codebook_size=VOCAB, codebook_embed_dim=8, ch=128, ch_mult=(1, 1, 2, 2, 4), z_channels=256,
                num_res_blocks=2)
VQ8 = replace(VQ16, ch_mult=(1, 2, 2, 4))
TOKENIZERS = {
    "vq_ds16_c2i": TokenizerSpec(LLAMAGEN_REPO, "vq_ds16_c2i.pt", VQ16),
    "vq_ds8_c2i": TokenizerSpec(LLAMAGEN_REPO, "vq_ds8_c2i.pt", VQ8),
    "vq_ds16_t2i": TokenizerSpec(T2I_REPO, "vq_ds16_t2i.pt", VQ16),
}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    repo: str
    filename: str  # the .pt file, or "" for a Hugging Face folder (the whole repository)
    preset: str
    tokenizer: str
    text: bool = False
    drafter_repo: str = ""

    @property
    def image_size(self) -> int:
        size = re.search(r"_(\d+)$", self.name)
        assert size is not None, f"model name {self.name!r} ends in its image size"
        return int(size.group(1))

    @property
    def grid_size(self) -> int:
        return self.image_size // TOKENIZERS[self.tokenizer].config.downsample

    def gpt_config(self) -> GPTConfig:
        if self.text:
            return GPTConfig(**PRESETS[self.preset], vocab_size=VOCAB, num_classes=0,
                             cls_token_num=CAPTION_TOKENS, grid_size=self.grid_size)
        return GPTConfig(**PRESETS[self.preset], vocab_size=VOCAB, num_classes=IMAGENET_CLASSES,
                         cls_token_num=1, grid_size=self.grid_size)


def _c2i(preset: str, size: int) -> ModelSpec:
    name = f"c2i_{preset}_{size}"
    return ModelSpec(name, LLAMAGEN_REPO, f"{name}.pt", preset, "vq_ds16_c2i")


MODELS: dict[str, ModelSpec] = {s.name: s for s in [
    _c2i("B", 256), _c2i("B", 384), _c2i("L", 256), _c2i("L", 384), _c2i("XL", 384), _c2i("XXL", 384),
    _c2i("3B", 384),
    ModelSpec("t2i_XL_stage1_256", T2I_REPO, "t2i_XL_stage1_256.pt", "XL", "vq_ds16_t2i", text=True),
    ModelSpec("lantern_t2i_XL_256", LANTERN_T2I_REPO, "", "XL", "vq_ds16_t2i", text=True,
              drafter_repo=LANTERN_DRAFTER_REPO),
]}


def _new_gpt(cfg: GPTConfig, text: bool, caption_dim: int) -> GPT:
    return text_gpt(cfg, caption_dim) if text else GPT(cfg)


def load_llamagen_gpt(path: Path, cfg: GPTConfig, text: bool = False, caption_dim: int = 2048) -> GPT:
    """A GPT from a LlamaGen `.pt` file (`{"model": sd}` or a bare sd), loaded strictly."""
    model = _new_gpt(cfg, text, caption_dim)
    load_strict(model, drop_ignored(read_torch_file(path)), str(path))
    return model.eval()


def hf_llama_config(folder: Path, text: bool) -> GPTConfig:
    """GPTConfig from a LANTERN Hugging Face folder's config.json (block_size gives the grid)."""
    c = read_json(folder / "config.json")
    try:
        grid = round(int(c.get("block_size", 256)) ** 0.5)
        cfg = GPTConfig(dim=int(c["hidden_size"]), n_layer=int(c["num_hidden_layers"]),
                        n_head=int(c["num_attention_heads"]), vocab_size=int(c["vocab_size"]),
                        num_classes=0 if text else int(c.get("num_classes", IMAGENET_CLASSES)),
                        cls_token_num=int(c.get("cls_token_num", CAPTION_TOKENS if text else 1)),
                        grid_size=grid, rope_base=float(c.get("rope_base", 10000.0)),
                        norm_eps=float(c.get("rms_norm_eps", 1e-5)))
    except (KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{folder / 'config.json'} is not a Llama config ({err!r})") from err
    if c.get("num_key_value_heads", cfg.n_head) != cfg.n_head:
        raise WeightsError(f"{folder}: grouped-query attention is not a LlamaGen layout")
    if int(c.get("intermediate_size", cfg.ffn_dim)) != cfg.ffn_dim:
        raise WeightsError(f"{folder}: intermediate_size {c['intermediate_size']} is not LlamaGen's "
                           f"{cfg.ffn_dim} for width {cfg.dim}")
    return cfg


def load_hf_llama_gpt(folder: Path, text: bool = True) -> GPT:
    """A GPT from LANTERN's Hugging Face Llama layout folder (config.json + weights), strictly."""
    cfg = hf_llama_config(folder, text)
    model = _new_gpt(cfg, text, int(read_json(folder / "config.json").get("caption_dim", 2048)))
    state = hf_llama_to_llamagen(read_hf_folder(folder), cfg.n_layer)
    load_strict(model, state, str(folder))
    return model.eval()


def load_official_tokenizer(spec: TokenizerSpec, path: Path) -> VQModel:
    model = VQModel(spec.config)
    load_strict(model, drop_ignored(read_torch_file(path)), str(path))
    return model.eval()


def load_eagle_folder(folder: Path, target: GPT) -> torch.nn.Module:
    """LANTERN's published EAGLE drafter (config.json + weights) for `target`, strictly."""
    c = read_json(folder / "config.json")
    cfg = target.cfg
    if (c.get("hidden_size"), c.get("num_attention_heads"), c.get("intermediate_size")) != \
            (cfg.dim, cfg.n_head, cfg.ffn_dim):
        raise WeightsError(f"{folder}: drafter shape (hidden_size, heads, intermediate_size) = "
                           f"{(c.get('hidden_size'), c.get('num_attention_heads'), c.get('intermediate_size'))}"
                           f" does not fit the target's {(cfg.dim, cfg.n_head, cfg.ffn_dim)}")
    net = EagleNet(replace(cfg, norm_eps=float(c.get("rms_norm_eps", cfg.norm_eps))))
    load_strict(net, eagle_to_engine(read_hf_folder(folder), cfg.vocab_size, cfg.dim), str(folder))
    return net.eval()


def _local_drafters(name: str, weights_dir: Path | None) -> dict[str, torch.nn.Module]:
    """A drafter trained here (python -m engine.train.distributed) and saved beside the weights."""
    path = None if weights_dir is None else Path(weights_dir) / f"eagle_drafter_{name}.safetensors"
    if path is None or not path.is_file():
        return {}
    return {"eagle": load_module(path, GPTConfig, EagleNet)}


def _published_drafters(spec: ModelSpec, target: GPT, weights_dir: Path | None) -> dict[str, torch.nn.Module]:
    if not spec.drafter_repo:
        return {}
    try:
        folder = resolve_folder(spec.drafter_repo, HF_PATTERNS, ["config.json"], weights_dir)
    except WeightsError as err:
        # The target still runs every training-free method; only eagle2 and lantern need this.
        log.warning("%s; eagle2 and lantern stay unavailable for %s", err, spec.name)
        return {}
    return {"eagle": load_eagle_folder(folder, target)}


def _resolve_all(jobs: list) -> list[Path]:
    """Run every resolver and report every missing file in one error, not just the first."""
    paths, errors = [], []
    for job in jobs:
        try:
            paths.append(job())
        except WeightsError as err:
            errors.append(str(err))
    if errors:
        raise WeightsError("\n".join(errors))
    return paths


def load_official(name: str, weights_dir: Path | None = None) -> ImageModel | TextImageModel:
    """An official model by name, on the CPU in float32 (engine.loading.load places it): an ImageModel, or a
    TextImageModel for text-to-image."""
    if name not in MODELS:
        raise InvalidInput(f"unknown model {name!r}; allowed: embedded, {', '.join(MODELS)}")
    spec = MODELS[name]
    tok = TOKENIZERS[spec.tokenizer]
    jobs = [lambda: resolve_file(tok.repo, tok.filename, weights_dir),
            (lambda: resolve_file(spec.repo, spec.filename, weights_dir)) if spec.filename else
            (lambda: resolve_folder(spec.repo, HF_PATTERNS, ["config.json"], weights_dir))]
    if spec.text:
        jobs.append(lambda: resolve_folder(T5_REPO, T5_PATTERNS, T5_REQUIRED, weights_dir))
    tok_path, target_path, *text_folder = _resolve_all(jobs)
    tokenizer = load_official_tokenizer(tok, tok_path)
    if spec.filename:
        target = load_llamagen_gpt(target_path, spec.gpt_config(), spec.text)
    else:
        target = load_hf_llama_gpt(target_path, spec.text)
    if target.cfg.vocab_size != tokenizer.cfg.codebook_size:
        raise WeightsError(f"{target_path} has a vocabulary of {target.cfg.vocab_size} tokens but "
                           f"{tok_path} a codebook of {tokenizer.cfg.codebook_size}: they are not a pair")
    drafters = {**_published_drafters(spec, target, weights_dir), **_local_drafters(name, weights_dir)}
    log.info("loaded %s (%s) with drafters: %s", name, spec.preset, ", ".join(drafters) or "none")
    if not spec.text:
        classes = tuple(str(i) for i in range(target.cfg.num_classes))
        return ImageModel(target, tokenizer, classes, name=name, drafters=drafters)
    # The caption is cut to the prefix length the model was trained with (LlamaGen: 120 tokens).
    encoder = TextEncoder(text_folder[0], max_tokens=target.cfg.cls_token_num)
    return TextImageModel(target, tokenizer, encoder, name=name, drafters=drafters)
