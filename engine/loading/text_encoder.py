"""FLAN-T5 caption features for text-to-image LlamaGen, through `transformers`.

As LlamaGen does: the prompt is tokenised to at most 120 tokens (padded to 120, so that the real
tokens sit where they sat in training), encoded by the T5 encoder with the padding masked, and the
features of the real tokens are kept. LlamaGen's caption cleaning (ftfy, HTML and URL removal) is
reduced to what changes ordinary prompts: lower case and collapsed white space.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from engine.loading.hub import folder_hint
from engine.model.weights import WeightsError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, T5EncoderModel

log = logging.getLogger("engine.loading.text_encoder")

T5_REPO = "google/flan-t5-xl"
T5_PATTERNS = ["*.json", "spiece.model", "*.safetensors"]
T5_REQUIRED = ["config.json"]


def clean_prompt(prompt: str) -> str:
    return re.sub(r"\s+", " ", prompt).strip().lower()


class TextEncoder:
    """Loads the encoder from a local folder on first use; `encode` gives (n, C) features."""

    def __init__(self, folder: Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 max_tokens: int = 120):
        self.folder, self.device, self.dtype, self.max_tokens = Path(folder), device, dtype, max_tokens
        self._tokenizer: PreTrainedTokenizerBase | None = None
        self._model: T5EncoderModel | None = None

    def to(self, device: str | torch.device) -> TextEncoder:
        """Run on `device` from now on (the encoder moves there if it is loaded already)."""
        self.device = device
        if self._model is not None:
            # transformers declares .to through functools.wraps, whose stub takes the device for `self`
            self._model.to(device)  # type: ignore[arg-type]
        return self

    def _loaded(self) -> tuple[PreTrainedTokenizerBase, T5EncoderModel]:
        """The tokenizer and the encoder, read from the folder on first use."""
        if self._tokenizer is not None and self._model is not None:
            return self._tokenizer, self._model
        try:  # transformers is optional and heavy: imported only when a text model first encodes
            from transformers import AutoTokenizer, T5EncoderModel
        except ImportError as err:
            raise WeightsError("text-to-image models need the `transformers` and `sentencepiece` packages: "
                               "pip install transformers sentencepiece") from err
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(self.folder))
            model = T5EncoderModel.from_pretrained(str(self.folder), dtype=self.dtype)
        except (OSError, ValueError) as err:
            raise WeightsError(f"{self.folder} is not a readable T5 model folder ({err}); "
                               + folder_hint(T5_REPO, T5_PATTERNS, "it")) from err
        self._tokenizer, self._model = tokenizer, model.to(self.device).eval()  # type: ignore[arg-type]  # as in to()
        log.info("loaded the text encoder from %s", self.folder)
        return self._tokenizer, self._model

    @property
    def width(self) -> int:
        _, model = self._loaded()
        return int(model.config.d_model)

    @torch.no_grad()
    def encode(self, prompt: str) -> torch.Tensor:
        """prompt -> float32 features (n, C) of its n real tokens (1 <= n <= max_tokens)."""
        tokenizer, model = self._loaded()
        batch = tokenizer([clean_prompt(prompt)], max_length=self.max_tokens, padding="max_length",
                          truncation=True, return_attention_mask=True, return_tensors="pt")
        ids = batch["input_ids"].to(self.device)  # (1, max_tokens)
        mask = batch["attention_mask"].to(self.device)  # (1, max_tokens)
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state[0]  # (max_tokens, C)
        n = int(mask.sum())
        return hidden[:n].float()  # right padding: the real tokens come first
