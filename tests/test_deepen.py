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


def test_training_only_the_inserted_blocks_leaves_the_trained_ones_as_they_were():
    from engine.train.deepen import train_only

    torch.manual_seed(1)
    deeper = deepen(GPT(TINY_GPT), 2)
    before = {name: p.detach().clone() for name, p in deeper.named_parameters()}
    inserted = new_layers(TINY_GPT.n_layer, 2)
    optimizer = torch.optim.AdamW(train_only(deeper, inserted), lr=1e-2)
    tokens = torch.randint(0, TINY_GPT.vocab_size, (2, TINY_GPT.num_image_tokens))
    logits = deeper.training_logits(torch.tensor([0, 1]), tokens)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    optimizer.step()
    for name, p in deeper.named_parameters():
        inserted_block = name.startswith("layers.") and int(name.split(".")[1]) in inserted
        if not inserted_block:  # embeddings, trained blocks, norm, head: as they were
            assert torch.equal(p, before[name]), name
        elif name.endswith(("attention.wo.weight", "feed_forward.w2.weight")):  # where the gradient enters
            assert not torch.equal(p, before[name]), name
