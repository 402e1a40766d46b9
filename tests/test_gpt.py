import torch

from engine.model.gpt import rope_table_2d
from engine.model.kv_cache import KVCache, attention_dtype
from engine.model.matmul import multiply_in
from tests.conftest import TINY_GPT, tiny_gpt


def test_rope_table_has_zero_condition_rows_and_turns_rows_then_columns():
    grid, head_dim, cls = 4, 16, 2
    table = rope_table_2d(grid, head_dim, 10000.0, cls)
    assert table.shape == (cls + grid * grid, head_dim // 2, 2)
    assert torch.all(table[:cls] == 0)
    quarter = head_dim // 4
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim // 2, 2).float() / (head_dim // 2)))
    for row in range(grid):
        for col in range(grid):
            entry = table[cls + row * grid + col]  # raster order
            torch.testing.assert_close(entry[:quarter, 0], torch.cos(row * inv_freq))
            torch.testing.assert_close(entry[:quarter, 1], torch.sin(row * inv_freq))
            torch.testing.assert_close(entry[quarter:, 0], torch.cos(col * inv_freq))
            torch.testing.assert_close(entry[quarter:, 1], torch.sin(col * inv_freq))


def test_condition_token_has_zero_queries_and_keys():
    from engine.model.gpt import apply_rope

    table = rope_table_2d(4, 16, 10000.0, 1)
    x = torch.randn(1, 1, 2, 16)
    assert torch.all(apply_rope(x, table[:1]) == 0)


def test_rope_rotates_interleaved_pairs_bit_for_bit_as_written():
    from engine.model.gpt import RMSNorm, apply_rope, rotation

    table = rope_table_2d(4, 16, 10000.0, 1)[3:9]  # (6, 8, 2)
    x = torch.randn(2, 6, 3, 16)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    cos, sin = table[None, :, None, :, 0], table[None, :, None, :, 1]
    expected = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1).flatten(3)
    assert torch.equal(apply_rope(x, table), expected)
    assert torch.equal(apply_rope(x, rotation(table)), expected)
    norm = RMSNorm(16, 1e-5)
    with torch.no_grad():
        norm.weight.normal_()
    xf = x.float()
    written = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    assert torch.equal(norm(x), written)


def test_rotation_at_positions_equals_rotating_the_table_rows_and_follows_the_table():
    from engine.loading.image_model import place
    from engine.model.gpt import rotation

    model = tiny_gpt()
    positions = torch.tensor([0, 5, 3, 3])
    for _ in range(2):  # the second call reads the rotations made by the first
        made, cut = rotation(model.rope[positions]), model.rotation_at(positions)
        assert torch.equal(made.cos, cut.cos) and torch.equal(made.sin, cut.sin)
    model.rope = model.rope * 2  # a replaced table, as a bound text prompt's, is not read stale
    assert torch.equal(model.rotation_at(positions).sin, rotation(model.rope[positions]).sin)
    place(model, "cpu", torch.bfloat16)  # the table stays float32, and so do its rotations
    assert model.rotation_at(positions).cos.dtype == torch.float32


def test_cached_incremental_decoding_equals_full_forward():
    model = tiny_gpt()
    cfg = TINY_GPT
    tokens = torch.randint(0, cfg.vocab_size, (2, cfg.num_image_tokens))
    class_ids = torch.tensor([1, cfg.num_classes])
    with torch.no_grad():
        full = model.training_logits(class_ids, tokens)  # (2, 16, V)
        cache = KVCache(cfg.n_layer, 2, cfg.n_head, cfg.block_size, cfg.head_dim)
        prefix = model.embed_condition(class_ids)
        pos = torch.arange(1)
        steps = [model.logits(model(prefix, pos, cache, pos, torch.ones(1, 1, dtype=torch.bool)))]
        for i in range(cfg.num_image_tokens - 1):
            p = torch.tensor([1 + i])
            h = model.embed_tokens(tokens[:, i:i + 1])
            mask = torch.ones(1, 2 + i, dtype=torch.bool)
            steps.append(model.logits(model(h, p, cache, p, mask)))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)


def test_with_bfloat16_products_a_batched_pass_gives_each_row_the_bits_of_a_one_token_pass():
    """What greedy speculative decoding stands on: verifying a chain in one pass computes each row
    exactly as vanilla's one-token steps do. With bfloat16 products (row by row, whatever the rows
    beside them) and attention in float64 this holds bit for bit; float32 products sum differently
    for different numbers of rows and match only to their last bits."""
    model = tiny_gpt()
    multiply_in(model, torch.bfloat16)
    cfg = TINY_GPT
    tokens = torch.randint(0, cfg.vocab_size, (2, 9))
    cache_dtype = attention_dtype(model.output.weight, greedy=True)
    assert cache_dtype == torch.float64
    assert attention_dtype(model.output.weight, greedy=False) == torch.float32  # sampling needs no bitwise match

    def passes(cache: KVCache, starts: list[int]) -> torch.Tensor:
        hidden = [model(model.embed_condition(torch.tensor([1, cfg.num_classes])), torch.arange(1), cache,
                        torch.arange(1), torch.ones(1, 1, dtype=torch.bool))]
        for start, end in zip(starts, starts[1:]):
            positions = torch.arange(1 + start, 1 + end)  # (T,)
            mask = torch.ones(end - start, 1 + end, dtype=torch.bool)
            mask[:, 1 + start:] = torch.ones(end - start, end - start, dtype=torch.bool).tril()
            hidden.append(model(model.embed_tokens(tokens[:, start:end]), positions, cache, positions, mask))
        return torch.cat(hidden, dim=1)  # (2, 10, D)

    with torch.no_grad():
        one_by_one = passes(KVCache.for_model(cfg, 2, cfg.block_size, cache_dtype), list(range(10)))
        batched = passes(KVCache.for_model(cfg, 2, cfg.block_size, cache_dtype), [0, 2, 7, 9])
    assert torch.equal(one_by_one, batched)
