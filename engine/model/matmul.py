"""Matrix products for inference on CPU: float32 products from prepacked weights where that is faster,
and products in bfloat16 where a model is set to multiply in it, or where a sampling decode's are large.

F.linear lays a weight out for its kernel again on every call; from a few rows up that costs more
than a copy laid out once (packed) and kept. Where the copy starts to pay depends on the CPU, so the
threshold (multiply-adds a product) and the packer are kept per vendor; weights were timed per shape
cycling through a forward pass's worth of copies (not cache-warm):
* Intel (and any other with MKL): MKL's packed sgemm. F.linear wins the two rows of a one-token step
  (768 x 256: 42 us against 48; 256 x 256: 16 against 18) and the packed product everything from
  about half a million (768 x 256 at four rows: 49 us against 63, at eight 53 against 78, at fourteen
  75 against 100; 256 x 256 at eight rows: 20 against 25; the 4,096-code head at one row: 269
  against 361, at fourteen 638 against 885). oneDNN's packed product is slower on the layers'
  weights (768 x 256 at eight rows: 84 us) and level with MKL's on the head. One copy, packed for
  32 rows, gives F.linear's results at every row count (the tests check 1 to 40); up to 16 rows
  (a default tree's 8 nodes, two CFG rows each) it runs as fast as a copy packed for 16, and from
  18 rows, where that one slows down, 10-13 % faster (768 x 256, 96 copies cycled: 128 against 146
  us at 18 rows, 154 against 172 at 32).
* AMD, where MKL's sgemm takes its generic path: oneDNN's, 1.5-2x faster on the 8-16 rows of a
  verified draft tree (two CFG rows per node), but each call costs about 15 us more, which a one-token
  step cannot win back. It wins from four rows of the attention and feed-forward inputs (390,000 to
  440,000 multiply-adds; 15.6-17.2 us against 17.6-20.4 us on the 8-layer model's 192-wide weights).
Smaller products, anything that needs gradients, other dtypes and other devices stay with F.linear. A
packed weight is a second copy of it, kept as long as the weight lives and rebuilt when the weight
changes in place.

On CPUs with native bfloat16 products (AVX-512 BF16, AMX), bfloat16 products are used two ways:
* A weight set to multiply in bfloat16 (`multiply_in`, `--dtype bfloat16-matmul`) is packed as
  bfloat16 and its input rounded to bfloat16, the sums kept in float32 and the result rounded to
  bfloat16, as bfloat16 autocast computes a product (the embedded model was trained so); everything
  between products stays float32. Such a product of a row is the same whatever the rows beside it,
  which float32's MKL and oneDNN kernels do not promise, so with row-exact attention, as greedy
  decoding has it (engine.model.attention), a verified tree's rows are bit for bit those of
  one-token passes. At a one-token step MKL's float32 products cost what bfloat16's do, and the
  row-exact attention costs more than SDPA, so this is an option, not the default.
* A sampling decode of a float32 model (`LargeProductsInBfloat16`, entered by the decoding loop)
  multiplies in bfloat16 only its products of at least LARGE_MIN_MACS multiply-adds: a bfloat16
  call costs a nearly fixed 65-90 us on the 16-layer model's 256-wide weights, where float32's grows
  with the rows (768 x 256: 53 us at two rows, 97 at eight, 138 at fourteen, against 91, 92 and 88;
  256 x 256: 17 to 43 against 65-68; the 4,096-code head: 530 against 316 at two rows, 842 against
  415 at fourteen). So a verified tree's wide products and every step's head round to bfloat16, and
  a one-token step's layers stay float32. MKL's packed float32 copies are faster than bfloat16 on a
  768 x 256 weight at 8-14 rows alone (53-77 us), but not inside decodes, where bfloat16's weights
  stream half the bytes: sampled decodes interleaved with each threshold ran fastest from 1.5
  million. Sampling claims the target's distribution, not its bits; greedy decoding keeps every
  product float32, whose bits its claim rests on. That threshold was measured on an Intel Xeon with
  AMX, whose cache held the model's weights. On an AMD EPYC with AVX-512 BF16 and a 32 MB L3, a
  one-token step streams the 16-layer model's 63 MB of float32 weights from memory, and bfloat16
  halves the bytes: there every product of 100,000 multiply-adds or more (the 16-layer model's
  smallest, 256 x 256 at two rows, has 131,000) rounds, which made every method's sampled decodes
  faster than the Xeon's threshold did. Other CPUs with native bfloat16 take the Xeon's. What this
  does to each method's speed-up on each CPU is in docs/cpus.md.
"""
from __future__ import annotations

import threading
import weakref

import torch
import torch.nn.functional as F
from torch import nn


def _cpuinfo(field: str) -> str:
    """The first value of `field` in Linux's /proc/cpuinfo ("vendor_id", "flags"), or "" elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next((line.split(":", 1)[1].strip() for line in info if line.startswith(field)), "")
    except OSError:
        return ""


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC", ...), or "" where Linux's /proc/cpuinfo is not: speed-ups
    measured here depend on it (see the docstring)."""
    return _cpuinfo("model name")


_MKL = torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
_AMD = _cpuinfo("vendor_id") == "AuthenticAMD"
# Which packed float32 product runs (None: none), from how many multiply-adds (see the docstring).
FLOAT32_PACKER = "mkl" if _MKL and not _AMD else "onednn" if _ONEDNN else None
PACKED_MIN_MACS = 500_000 if FLOAT32_PACKER == "mkl" else 350_000 if _AMD else 2_000_000
MKL_PACKED_ROWS = 32
# Whether the CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX); elsewhere oneDNN emulates it.
NATIVE_BFLOAT16 = bool({"avx512_bf16", "amx_bf16"} & set(_cpuinfo("flags").split()))
# (id(weight), dtype) -> (weak reference to it, its (storage, version) when packed, the packed copy
# in dtype); a plain dict, as a weak-keyed one's lookups cost more than the products they guard here.
_packed: dict[tuple[int, torch.dtype], tuple[weakref.ref, tuple[int, int], torch.Tensor]] = {}
# id(weight) -> (weak reference to it, the dtype its products run in), set by multiply_in
_product_dtypes: dict[int, tuple[weakref.ref, torch.dtype]] = {}


def multiply_in(module: nn.Module, dtype: torch.dtype | None) -> None:
    """Run the products of every nn.Linear weight of `module` that goes through `linear` in `dtype`
    (bfloat16 on a float32 model), or in the weight's own dtype (None). The weights stay as they are."""
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            _product_dtypes.pop(id(sub.weight), None)
            if dtype is not None and dtype != sub.weight.dtype:
                _product_dtypes[id(sub.weight)] = (_dropped_with(sub.weight, _product_dtypes, id(sub.weight)),
                                                   dtype)


def _dropped_with(weight: torch.Tensor, table: dict, key: object) -> weakref.ref:
    """A weak reference to `weight` whose callback drops its entry `key` from `table` with it,
    before its id can be reused."""
    return weakref.ref(weight, lambda _: table.pop(key, None))


def _wanted(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (x.numel() * weight.shape[0] >= PACKED_MIN_MACS and FLOAT32_PACKER is not None
            and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32 and _no_grad(x, weight))


def _no_grad(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))


def weight_state(weight: torch.Tensor) -> tuple[int, int]:
    """(storage, version): changes when the tensor is replaced or changed in place, so that a copy
    derived from it knows when to be rebuilt (inference tensors carry no version and never change)."""
    return weight.data_ptr(), -1 if weight.is_inference() else weight._version


def _pack(weight: torch.Tensor, rows: int, dtype: torch.dtype) -> torch.Tensor:
    key = (id(weight), dtype)
    version = weight_state(weight)
    entry = _packed.get(key)
    if entry is None or entry[0]() is not weight or entry[1] != version:
        if dtype == torch.float32 and FLOAT32_PACKER == "mkl":
            packed = torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), MKL_PACKED_ROWS)
        else:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(dtype), rows)
        entry = (_dropped_with(weight, _packed, key), version, packed)
        _packed[key] = entry
    return entry[2]


def product_dtype(weight: torch.Tensor) -> torch.dtype | None:
    """The dtype `multiply_in` set for the products of `weight`, or None (its own dtype)."""
    entry = _product_dtypes.get(id(weight))
    return entry[1] if entry is not None and entry[0]() is weight else None


# Where a sampling decode's products start to round to bfloat16 (see the docstring): on AMD, every one.
LARGE_MIN_MACS = 100_000 if _AMD else 1_500_000
_large = threading.local()  # .on: this thread multiplies products of LARGE_MIN_MACS or more in bfloat16


def rounds_large_products(weight: torch.Tensor, greedy: bool) -> bool:
    """Whether a decode of a model whose output weight is `weight` multiplies its large products in
    bfloat16: when it samples, on a CPU with native bfloat16 products, and the model has no product
    dtype set."""
    return (not greedy and NATIVE_BFLOAT16 and weight.device.type == "cpu" and weight.dtype == torch.float32
            and product_dtype(weight) is None)


class LargeProductsInBfloat16:
    """While entered (reusable), this thread's float32 products of LARGE_MIN_MACS multiply-adds or
    more run in bfloat16 where `enabled`; smaller ones stay float32."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._previous = False

    def __enter__(self) -> None:
        self._previous = getattr(_large, "on", False)
        _large.on = self.enabled

    def __exit__(self, *exc) -> None:
        _large.on = self._previous


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (..., in) @ weight (out, in).T -> (..., out), as F.linear without a bias."""
    low_dtype = product_dtype(weight) if _product_dtypes else None
    if (low_dtype is None and getattr(_large, "on", False) and x.numel() * weight.shape[0] >= LARGE_MIN_MACS
            and weight.dtype == torch.float32):
        low_dtype = torch.bfloat16
    if low_dtype is not None and x.dtype == torch.float32 and _no_grad(x, weight):
        low = x.to(low_dtype)  # (..., in)
        if _ONEDNN and x.device.type == "cpu":
            packed = _pack(weight, x.numel() // x.shape[-1], low_dtype)
            return torch.ops.mkldnn._linear_pointwise(low, packed, None, "none", [], "").float()
        return F.linear(low, weight.to(low_dtype)).float()
    if not _wanted(x, weight):
        return F.linear(x, weight)
    rows = x.numel() // x.shape[-1]
    packed = _pack(weight, rows, torch.float32)
    if FLOAT32_PACKER == "mkl":  # given the rows it is called with, it uses the packed copy
        return torch.ops.mkl._mkl_linear(x, packed, weight, None, rows)
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
