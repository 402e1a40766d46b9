import torch

from engine.core.tree import ancestor_mask, mask_for_cache
from engine.model.attention import needs_row_exact
from engine.model.gpt import GPTConfig, rope_table_2d
from engine.model.kv_cache import KVCache
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


def test_with_bfloat16_products_a_verified_tree_gives_its_path_the_bits_of_one_token_passes():
    """What greedy speculative decoding stands on: a tree's pass computes each node on the accepted
    path exactly as vanilla's one-token steps do. With bfloat16 products (row by row, whatever the
    rows beside them) and row-exact attention this holds bit for bit: trees of 1 to 9 nodes, siblings
    between a path's nodes, from the first position on, at the shipped model's head size. With SDPA
    it does not (checked by flipping row_exact below); float32 products sum differently for different
    numbers of rows and match only to their last bits."""
    cfg = GPTConfig(dim=256, n_layer=2, n_head=4, vocab_size=64, num_classes=3, grid_size=16)
    model = tiny_gpt(config=cfg)
    multiply_in(model, torch.bfloat16)
    assert needs_row_exact(model.output.weight, greedy=True)
    assert not needs_row_exact(model.output.weight, greedy=False)  # sampling needs no bitwise match
    tokens = torch.randint(0, cfg.vocab_size, (1, 40)).expand(2, -1)  # (2, 40): CFG's two rows
    classes = torch.tensor([1, cfg.num_classes])
    capacity = cfg.block_size + 9

    def start() -> KVCache:
        cache = KVCache.for_model(cfg, 2, capacity, row_exact=True)
        model(model.embed_condition(classes), torch.arange(1), cache, torch.arange(1),
              torch.ones(1, 1, dtype=torch.bool))
        return cache

    with torch.no_grad():
        cache = start()
        one_by_one = []
        for i in range(tokens.shape[1]):
            position = torch.tensor([1 + i])
            mask = torch.ones(1, 2 + i, dtype=torch.bool)
            one_by_one.append(model(model.embed_tokens(tokens[:, i:i + 1]), position, cache, position, mask))

        cache, committed, done = start(), 1, 0
        for path_length in (1, 4, 2, 5, 1, 3, 5, 4, 2, 3):
            # the path's nodes, each followed by a sibling that is not kept (the last one by none)
            parents: list[int] = []
            path: list[int] = []
            for depth in range(path_length):
                path.append(len(parents))
                parents.append(path[-2] if depth else -1)
                if depth < path_length - 1:
                    parents.append(path[-1])
            n = len(parents)
            node_tokens = torch.randint(0, cfg.vocab_size, (n,))
            node_tokens[path] = tokens[0, done:done + path_length]
            tree = ancestor_mask(torch.tensor(parents))  # (N, N)
            positions = committed + tree.sum(1) - 1  # (N,): committed + depth
            hidden = model(model.embed_tokens(node_tokens.expand(2, n)), positions, cache,
                           torch.arange(committed, committed + n), mask_for_cache(tree, committed))
            for node, step in zip(path, range(done, done + path_length)):
                assert torch.equal(hidden[:, node], one_by_one[step][:, 0]), f"token {step}, tree of {n}"
            cache.keep([committed + node for node in path], committed)
            committed, done = committed + path_length, done + path_length
