"""The embedded model shipped in assets/: its sizes, file names and loaders.

Sizes are chosen for a 2-core CPU: 64 x 64 images, a 16 x 16 token grid (LlamaGen's 256 tokens)
from a 4x-downsampling tokenizer, and a 12-layer target (as deep as LlamaGen-B) that is narrow
enough to train here, so that a one-layer drafter costs a small fraction of a target step.
"""
from __future__ import annotations

from pathlib import Path

import torch

from engine.dataset import CLASS_NAMES
from engine.drafters.eagle_net import load_eagle_net
from engine.drafters.medusa import MedusaConfig, MedusaHeads
from engine.gpt import GPT, GPTConfig
from engine.image_model import ImageModel
from engine.tokenizer import VQConfig, VQModel
from engine.weights import load_module

ASSETS = Path(__file__).resolve().parent.parent / "assets"

VQ = VQConfig(codebook_size=1024, codebook_embed_dim=8, ch=32, ch_mult=(1, 2, 2), z_channels=64,
              num_res_blocks=1)
TARGET = GPTConfig(dim=192, n_layer=12, n_head=6, vocab_size=VQ.codebook_size,
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
