"""Matrix products for inference on CPU: oneDNN with prepacked weights where that is faster.

On CPUs where MKL's sgemm takes its generic path (AMD's), oneDNN's is 1.5-2x faster on the 8-16
rows of a verified draft tree (two CFG rows per node), but each call costs about 15 us more, which a
one-token step cannot win back. Measured per weight shape on the embedded model, with the weights
cycling through twelve layers' worth of copies as a forward pass streams them (not cache-warm),
oneDNN wins from about ONEDNN_MIN_MACS multiply-adds on: four rows of the attention and feed-forward
inputs (390,000 to 440,000; 15.6-17.2 us against 17.6-20.4 us), never the 192 x 192 output product
up to eight rows (295,000). Smaller products, anything that needs gradients, other dtypes and other
devices stay with F.linear. A packed weight is a second copy of it, kept as long as
the weight lives and rebuilt when the weight changes in place.
"""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

ONEDNN_MIN_MACS = 350_000
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
# id(weight) -> (weak reference to it, its (storage, version) when packed, the packed copy); a plain
# dict, as a weak-keyed one's lookups cost more than the products they guard at these sizes.
_packed: dict[int, tuple[weakref.ref, tuple[int, int], torch.Tensor]] = {}


def _wanted(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (x.numel() * weight.shape[0] >= ONEDNN_MIN_MACS and _ONEDNN and x.device.type == "cpu"
            and x.dtype == weight.dtype == torch.float32
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)))


def weight_state(weight: torch.Tensor) -> tuple[int, int]:
    """(storage, version): changes when the tensor is replaced or changed in place, so that a copy
    derived from it knows when to be rebuilt (inference tensors carry no version and never change)."""
    return weight.data_ptr(), -1 if weight.is_inference() else weight._version


def _pack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    key = id(weight)
    version = weight_state(weight)
    entry = _packed.get(key)
    if entry is None or entry[0]() is not weight or entry[1] != version:
        # The callback drops the copy with the weight, before its id can be reused.
        ref = weakref.ref(weight, lambda _: _packed.pop(key, None))
        entry = (ref, version, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows))
        _packed[key] = entry
    return entry[2]


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (..., in) @ weight (out, in).T -> (..., out), as F.linear without a bias."""
    if not _wanted(x, weight):
        return F.linear(x, weight)
    packed = _pack(weight, x.numel() // x.shape[-1])
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
