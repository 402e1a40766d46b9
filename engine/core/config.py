"""Frozen configuration for decoding, validated on construction.

Every bad value raises one `InvalidInput` (a ValueError) naming the value and what is allowed, so
that the command line and the app can show the message as it is.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_SEED = 2**63 - 1
# The allowed ranges of the sampling settings: the checks below, the page's sliders and the command
# line's help all read these.
TEMPERATURE_RANGE = (0.0, 2.0)  # 0 is greedy
CFG_SCALE_RANGE = (1.0, 10.0)  # 1 is no guidance


class InvalidInput(ValueError):
    """A user-supplied value is outside what is allowed."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidInput(message)


def check_count(name: str, value: int, minimum: int = 1) -> int:
    """A count (images, threads, repeats, steps) of `minimum` or more; `name` "" leaves the value
    unnamed, where the caller names it (argparse says which argument)."""
    label = f"{name} {value}" if name else str(value)
    _require(value >= minimum, f"{label} is out of range; allowed: {minimum} or more")
    return value


def check_class_id(class_id: int, num_classes: int) -> int:
    _require(0 <= class_id < num_classes,
             f"class id {class_id} is out of range; allowed: 0 to {num_classes - 1}")
    return class_id


@dataclass(frozen=True)
class SamplingConfig:
    """How target (and drafter) logits become a distribution. temperature 0 means greedy."""

    temperature: float = 1.0
    top_k: int = 0  # 0 keeps every token
    top_p: float = 1.0
    cfg_scale: float = 4.0
    seed: int = 0
    # Hugging Face's warpers, as LANTERN's official code uses them, apply top-p before top-k;
    # LlamaGen's sampler applies top-k first. The two differ when both are on.
    top_p_first: bool = False

    def __post_init__(self) -> None:
        _require(TEMPERATURE_RANGE[0] <= self.temperature <= TEMPERATURE_RANGE[1],
                 f"temperature {self.temperature} is out of range; allowed: 0 (greedy) to {TEMPERATURE_RANGE[1]:g}")
        _require(self.top_k >= 0, f"top-k {self.top_k} is out of range; allowed: 0 (off) or a positive count")
        _require(0.0 < self.top_p <= 1.0, f"top-p {self.top_p} is out of range; allowed: (0, 1]")
        _require(CFG_SCALE_RANGE[0] <= self.cfg_scale <= CFG_SCALE_RANGE[1],
                 f"CFG scale {self.cfg_scale} is out of range; allowed: 1 (off) to {CFG_SCALE_RANGE[1]:g}")
        _require(0 <= self.seed <= MAX_SEED, f"seed {self.seed} is out of range; allowed: 0 to 2**63 - 1")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def uses_cfg(self) -> bool:
        return self.cfg_scale != 1.0


TREE_SCORES = ("rule", "draft")
# The allowed ranges of the tree's sizes: the checks below, the page's sliders and the command line
# read these. A shared app keeps trees small enough that one user's request cannot stall the others.
TREE_DEPTH_RANGE = (1, 16)  # one grid row: as deep as a drafter reading the token above can draft
TREE_TOP_K_RANGE = (1, 16)
TREE_TOKENS_RANGE = (2, 64)


@dataclass(frozen=True)
class TreeConfig:
    """EAGLE-2 dynamic tree: at most `depth` drafter calls, `top_k` children per node, `total_tokens` kept.

    The defaults suit a 2-core CPU, where every drafter call streams the drafter's weights from
    memory again and verifying a node is far from free (the paper's GPU setting, a 59-token tree,
    suits hardware where both nearly are): each node ranked by the rule's estimate of being reached
    and accepted, no node expanded below a 0.2 chance, at most 6 levels of 2 children and 7 tokens.
    They were sized by timing trees against vanilla, image by image: deeper trees paid more drafter
    calls than their extra accepted tokens earned, shallower ones lost accepted tokens, and EAGLE-2's
    exact rule mostly drafts one or two levels whatever the tree (docs/methods.md, "The dynamic tree").
    """

    depth: int = 6
    top_k: int = 2
    total_tokens: int = 7
    score: str = "rule"  # "draft": EAGLE-2's q product; "rule": the rule's acceptance estimate
    min_score: float = 0.2  # nodes scoring below this are not expanded (0: every level is drafted)

    def __post_init__(self) -> None:
        _require(0.0 <= self.min_score < 1.0,
                 f"tree min score {self.min_score} is out of range; allowed: 0 to below 1")
        _require(self.score in TREE_SCORES,
                 f"tree score {self.score!r} is unknown; allowed: {', '.join(TREE_SCORES)}")
        for label, value, (low, high) in (("tree depth", self.depth, TREE_DEPTH_RANGE),
                                          ("tree top-k", self.top_k, TREE_TOP_K_RANGE),
                                          ("tree total tokens", self.total_tokens, TREE_TOKENS_RANGE)):
            _require(low <= value <= high, f"{label} {value} is out of range; allowed: {low} to {high}")
