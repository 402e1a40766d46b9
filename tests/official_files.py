"""Tiny random weights written as the official text-to-image files are laid out on the Hub: LANTERN's
Hugging Face Llama target and drafter, the VQ-16 tokenizer and a FLAN-T5-style encoder."""
from pathlib import Path

import torch

from engine.loading.official import VQ16
from engine.model.tokenizer import VQModel
from tests.llamagen_reference import t2i_state, to_hf_llama, write_hf_folder

VOCAB = VQ16.codebook_size  # a target and its tokenizer share the codebook
WORDS = ["<pad>", "</s>", "<unk>"] + "a photo of cat blue car an astronaut riding horse".split()


def _write_text_encoder(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

    vocab = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    vocab.pre_tokenizer = pre_tokenizers.Whitespace()
    vocab.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=vocab, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(folder)
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(WORDS), d_model=24, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    T5EncoderModel(config).save_pretrained(folder)


def write_lantern_t2i_folder(root: Path) -> Path:
    """Every file `lantern_t2i_XL_256` needs, under `root`, as a user's weights folder has them."""
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.save({"model": VQModel(VQ16).state_dict()}, root / "vq_ds16_t2i.pt")
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 256, "vocab_size": VOCAB,
              "rms_norm_eps": 1e-5, "caption_dim": 24, "cls_token_num": 120, "block_size": 16}
    write_hf_folder(root / "LlamaGen-T2I", to_hf_llama(t2i_state(64, 2, VOCAB, 24, 120, seed=2), 2), config)
    g = torch.Generator().manual_seed(1)
    drafter = {name: torch.randn(*shape, generator=g) * 0.3 for name, shape in {
        "embed_tokens.weight": (VOCAB, 64), "fc.weight": (64, 128), "fc.bias": (64,),
        "layers.0.self_attn.q_proj.weight": (64, 64), "layers.0.self_attn.k_proj.weight": (64, 64),
        "layers.0.self_attn.v_proj.weight": (64, 64), "layers.0.self_attn.o_proj.weight": (64, 64),
        "layers.0.mlp.gate_proj.weight": (256, 64), "layers.0.mlp.up_proj.weight": (256, 64),
        "layers.0.mlp.down_proj.weight": (64, 256), "layers.0.post_attention_layernorm.weight": (64,)}.items()}
    write_hf_folder(root / "llamagen_drafter", drafter, {"hidden_size": 64, "num_attention_heads": 4,
                                                         "intermediate_size": 256, "rms_norm_eps": 1e-6})
    _write_text_encoder(root / "flan-t5-xl")
    return root
