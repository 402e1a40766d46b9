import torch
import torch.nn.functional as F

from engine.model.attention import attend, row_exact_mask


def _additive(mask: torch.Tensor) -> torch.Tensor:
    return torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))


def _with_ones(v: torch.Tensor) -> torch.Tensor:
    """v (..., hd) -> (..., hd + 1), as a row-exact cache keeps its values."""
    return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)


def test_row_exact_attention_gives_a_tree_row_the_bits_of_its_one_token_pass():
    """A tree row sees the committed slots and its ancestors, with siblings' slots hidden between
    them; after its path is kept, vanilla's one-token pass sees the same entries side by side. The
    row-exact form gives both the same bits, from the first slots on (few slots took other kernels
    until they were rounded up to blocks; about 2 % of these trials part without that) to the last
    (where a kernel splits the sum over the slots, 10 of the 152 trials of 192 slots or more parted
    on an AMD EPYC while the values' product was float32)."""
    torch.manual_seed(0)
    batch, heads, head_dim, capacity = 2, 4, 64, 270
    for _ in range(300):
        committed = int(torch.randint(1, 255, ()))
        depth = int(torch.randint(1, 6, ()))
        nodes = depth + int(torch.randint(0, 6, ()))
        k = torch.randn(batch, heads, capacity, head_dim)  # (B, H, S, hd)
        v = _with_ones(torch.randn(batch, heads, capacity, head_dim))  # (B, H, S, hd + 1)
        q = torch.randn(batch, heads, 1, head_dim)  # (B, H, 1, hd)
        ancestors = sorted(torch.randperm(nodes)[:depth].tolist())
        in_tree = torch.zeros(nodes, committed + nodes, dtype=torch.bool)  # row 0 is the one checked
        in_tree[:, :committed] = True
        in_tree[0, [committed + a for a in ancestors]] = True
        in_tree = row_exact_mask(in_tree, capacity)
        slots = in_tree.shape[1]
        from_tree = attend(q.expand(-1, -1, nodes, -1), k[:, :, :slots], v[:, :, :slots],
                           _additive(in_tree), row_exact=True)[:, :, :1]

        kept = list(range(committed)) + [committed + a for a in ancestors]
        alone = row_exact_mask(torch.ones(1, len(kept), dtype=torch.bool), capacity)
        slots = alone.shape[1]
        packed_k = torch.cat([k[:, :, kept], k[:, :, len(kept):slots]], dim=2)  # (B, H, slots, hd)
        packed_v = torch.cat([v[:, :, kept], v[:, :, len(kept):slots]], dim=2)  # (B, H, slots, hd + 1)
        one_token = attend(q, packed_k, packed_v, _additive(alone), row_exact=True)
        assert torch.equal(from_tree, one_token), (committed, depth, nodes)


def test_row_exact_attention_is_attention():
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 2, 4, 7, 64)  # (B, H, T, hd) each, T = S = 7
    mask = torch.ones(7, 7, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=_additive(mask))
    for rows in (1, 2, 7):  # fewer rows than the row-exact form multiplies are padded and cut
        got = attend(q[:, :, :rows], k, _with_ones(v), _additive(mask[:rows]), row_exact=True)
        torch.testing.assert_close(got, expected[:, :, :rows], rtol=1e-5, atol=1e-5)
