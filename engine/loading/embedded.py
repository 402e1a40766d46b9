"""The embedded model shipped in assets/: its sizes, file names and loaders.

Sizes are chosen for a 2-core CPU: 64 x 64 images, a 16 x 16 token grid (LlamaGen's 256 tokens)
from a 4x-downsampling tokenizer with 4,096 codes (LlamaGen has 16,384; a smaller codebook would give
each code more probability mass and fill LANTERN's neighbour sets faster), and an 8-layer target
narrow enough to train here to a flat held-out loss, so that a one-layer drafter costs a small
fraction of a target step.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.data.dataset import CLASS_NAMES
from engine.drafters.eagle_net import load_eagle_net
from engine.drafters.medusa import MedusaConfig, MedusaHeads
from engine.loading.image_model import ImageModel
from engine.model.gpt import GPT, GPTConfig
from engine.model.tokenizer import VQConfig, VQModel
from engine.model.weights import WeightsError, load_module, read_metadata

ASSETS = Path(__file__).resolve().parents[2] / "assets"

VQ = VQConfig(codebook_size=4096, codebook_embed_dim=8, ch=32, ch_mult=(1, 2, 2), z_channels=64,
              num_res_blocks=1)
# The target `python -m engine.train.target` trains: 8 layers of width 256 (8.9M parameters), so that
# a one-layer drafter costs a small share of a target pass. Weights carry their own config, so the
# shipped file loads whatever size it was trained at (docs/model.md).
TARGET = GPTConfig(dim=256, n_layer=8, n_head=4, vocab_size=VQ.codebook_size,
                   num_classes=len(CLASS_NAMES), cls_token_num=1, grid_size=16)
# The separate draft model of standard speculative sampling: two layers, width 128.
SPS_DRAFT = GPTConfig(dim=128, n_layer=2, n_head=4, vocab_size=VQ.codebook_size,
                      num_classes=len(CLASS_NAMES), cls_token_num=1, grid_size=16)

TOKENIZER_FILE = "tokenizer.safetensors"
TARGET_FILE = "target.safetensors"
CLASSIFIER_FILE = "classifier.safetensors"
EAGLE_FILE = "eagle_drafter.safetensors"
MEDUSA_FILE = "medusa_heads.safetensors"
SPS_FILE = "sps_draft.safetensors"
HELD_OUT_SAMPLE_FILE = "held_out_sample.npz"  # two held-out images a class, for checks without the image sets


def load_held_out_sample(assets: Path = ASSETS) -> tuple[np.ndarray, np.ndarray]:
    """Held-out images (N, 64, 64, 3) uint8 and their class ids (N,)."""
    with np.load(assets / HELD_OUT_SAMPLE_FILE) as data:
        return data["images"], data["labels"]


def embedded_metadata(assets: Path = ASSETS) -> dict:
    """What the shipped target says of itself (config, class names, image sets, training), read from
    its file's header without loading it; empty when the file is missing or unreadable (loading it
    then reports why)."""
    try:
        return read_metadata(assets / TARGET_FILE)
    except WeightsError:
        return {}


def load_embedded_tokenizer(assets: Path = ASSETS) -> VQModel:
    return load_module(assets / TOKENIZER_FILE, VQConfig, VQModel)


def load_embedded_target(assets: Path = ASSETS) -> GPT:
    return load_module(assets / TARGET_FILE, GPTConfig, GPT)


def load_embedded_drafters(assets: Path = ASSETS) -> dict[str, torch.nn.Module]:
    """Every trained drafter shipped in assets/; a method whose drafter is absent is unavailable."""
    kinds = {"sps": (SPS_FILE, GPTConfig, GPT), "medusa": (MEDUSA_FILE, MedusaConfig, MedusaHeads)}
    # The EAGLE file says in its metadata which inputs its network takes.
    drafters = {"eagle": load_eagle_net(assets / EAGLE_FILE)} if (assets / EAGLE_FILE).exists() else {}
    return drafters | {kind: load_module(assets / file, config_type, module_type)
                       for kind, (file, config_type, module_type) in kinds.items() if (assets / file).exists()}


def load_embedded(assets: Path = ASSETS) -> ImageModel:
    """The embedded model on the CPU in float32, with every drafter shipped beside it."""
    return ImageModel(load_embedded_target(assets), load_embedded_tokenizer(assets), CLASS_NAMES,
                      name="embedded", drafters=load_embedded_drafters(assets))
