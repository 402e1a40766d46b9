import torch

from engine.core.tree import DraftTree, ancestor_mask, mask_for_cache


def test_hand_made_tree_gives_mask_depths_positions_and_paths():
    #        0
    #      /   \
    #     1     2
    #    / \     \
    #   3   4     5
    #   |
    #   6
    parents = torch.tensor([-1, 0, 0, 1, 1, 2, 3])
    tree = DraftTree(torch.arange(7), parents, torch.ones(7, dtype=torch.float64))
    assert tree.depths.tolist() == [0, 1, 1, 2, 2, 2, 3]
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0, 0],
        [1, 1, 0, 1, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0],
        [1, 0, 1, 0, 0, 1, 0],
        [1, 1, 0, 1, 0, 0, 1],
    ], dtype=torch.bool)
    assert torch.equal(ancestor_mask(parents), expected)
    assert tree.paths() == [[0, 1, 4], [0, 2, 5], [0, 1, 3, 6]]
    assert tree.children() == [[1, 2], [3, 4], [5], [6], [], [], []]
    full = mask_for_cache(expected, committed=3)
    assert full.shape == (7, 10) and bool(full[:, :3].all())
    assert torch.equal(full[:, 3:], expected)
