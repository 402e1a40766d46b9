"""Deepening a trained target: the same function, more layers, and the inserted blocks named."""
import torch

from engine.model.gpt import GPT
from engine.train.deepen import deepen, new_layers
from tests.conftest import TINY_GPT


def test_a_deepened_gpt_computes_what_it_was_given_and_names_its_new_blocks():
    torch.manual_seed(0)
    model = GPT(TINY_GPT).eval()
    deeper = deepen(model, 3)
    assert deeper.cfg.n_layer == 3 * TINY_GPT.n_layer
    tokens = torch.randint(0, TINY_GPT.vocab_size, (2, TINY_GPT.num_image_tokens))
    classes = torch.tensor([0, model.null_class])
    with torch.no_grad():
        assert torch.allclose(model.training_logits(classes, tokens), deeper.training_logits(classes, tokens),
                              atol=1e-6)
    inserted = new_layers(TINY_GPT.n_layer, 3)
    assert len(inserted) == 2 * TINY_GPT.n_layer and 0 not in inserted and 1 in inserted
    for index in inserted:  # zeroed output projections: nothing reaches the residual stream yet
        assert not deeper.layers[index].attention.wo.weight.any()
        assert not deeper.layers[index].feed_forward.w2.weight.any()
    for index in range(0, deeper.cfg.n_layer, 3):
        assert torch.equal(deeper.layers[index].attention.wqkv.weight, model.layers[index // 3].attention.wqkv.weight)
