"""Frequency tests with a stated power, shared by the distribution tests.

Every check here is a two-sided test on counts whose expectation the calling test computed on its own
(never from the module under test). Limits are Bonferroni-corrected so that an engine that is right
fails a whole test with probability at most FAMILY_ALPHA (one run in 100,000): the tests are seeded,
so a false alarm would be a permanent one, and the margin keeps a seed or engine change that is still
correct from tripping them. POWER is the chance a stated error is caught; the `*_power` helpers compute
it (normal approximation to the binomial; non-central chi-square for the chi-square test), and each
test asserts that its sample size has the power its docstring claims, so the claim cannot go stale.
"""
from __future__ import annotations

import numpy as np
from scipy import optimize, stats

FAMILY_ALPHA = 1e-5
POWER = 0.99


def z_limit(checks: int, alpha: float = FAMILY_ALPHA) -> float:
    """The |z| above which one of `checks` two-sided tests fails, their family at level alpha."""
    return float(stats.norm.isf(alpha / (2 * checks)))


def binomial_power(n: float, p0: float, p1: float, z: float) -> float:
    """The chance that |X - n p0| > z sd0 when X ~ Binomial(n, p1): the power of the z-test of a
    count whose probability is p0 when it is really p1 (normal approximation)."""
    sd0, sd1 = np.sqrt(n * p0 * (1 - p0)), np.sqrt(max(n * p1 * (1 - p1), 1e-300))
    shift = n * (p1 - p0)
    return float(stats.norm.sf((z * sd0 - shift) / sd1) + stats.norm.cdf((-z * sd0 - shift) / sd1))


def smallest_shift(n: float, p0: float, z: float, power: float = POWER) -> float:
    """The smallest rise d of a probability p0 that the z-test catches with `power`: solves
    binomial_power(n, p0, p0 + d, z) = power."""
    return float(optimize.brentq(lambda d: binomial_power(n, p0, p0 + d, z) - power, 1e-9, 1 - p0))


def frequency_misfits(counts: np.ndarray, expected_p: np.ndarray, z: float) -> list[str]:
    """Tokens whose count strays more than z standard errors from n * expected_p; a token that should
    never appear fails on its first appearance."""
    n = counts.sum()
    misfits = []
    for token, (count, p) in enumerate(zip(counts, expected_p)):
        if p <= 0:
            if count > 0:
                misfits.append(f"token {token}: {count} draws, expected none")
            continue
        score = (count - n * p) / np.sqrt(n * p * (1 - p)) if p < 1 else 0.0
        if abs(score) > z:
            misfits.append(f"token {token}: {count} of {n} ({count / n:.4f}), expected {p:.4f}, z = {score:.1f}")
    return misfits


def pooled_misfit(successes: float, chances: np.ndarray, z: float, what: str) -> list[str]:
    """A count of independent trials whose success chances are `chances` (one per trial), tested
    as a whole: its mean is the sum of the chances, its variance the sum of c (1 - c)."""
    mean, var = chances.sum(), (chances * (1 - chances)).sum()
    score = (successes - mean) / np.sqrt(var)
    if abs(score) <= z:
        return []
    return [f"{what}: {successes:.0f} of {len(chances)}, expected {mean:.1f}, z = {score:.1f}"]


def pooled_power(chances: np.ndarray, raise_by: float, z: float) -> float:
    """The power of `pooled_misfit` when every chance below 1 is really raised by `raise_by`
    (capped at 1): the acceptance-rate test against a rule that is that much too generous."""
    raised = np.minimum(chances + raise_by, 1.0)
    mean0, sd0 = chances.sum(), np.sqrt((chances * (1 - chances)).sum())
    mean1, sd1 = raised.sum(), np.sqrt((raised * (1 - raised)).sum())
    return float(stats.norm.sf((mean0 + z * sd0 - mean1) / sd1))


def pooled_cells(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Cells for a chi-square test: those expected at least `min_expected` times kept, the rest merged
    into one cell (dropped if even that falls short), so the chi-square approximation holds."""
    n = counts.sum()
    big = probs * n >= min_expected
    kept_c, kept_p = list(counts[big]), list(probs[big])
    if probs[~big].sum() * n >= min_expected:
        kept_c.append(counts[~big].sum())
        kept_p.append(probs[~big].sum())
    else:  # too rare to test as a cell: fold into the smallest kept one
        kept_c[int(np.argmin(kept_p))] += counts[~big].sum()
        kept_p[int(np.argmin(kept_p))] += probs[~big].sum()
    return np.array(kept_c, dtype=float), np.array(kept_p)


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic and its degrees of freedom over pooled cells."""
    c, p = pooled_cells(counts, probs)
    expected = c.sum() * p / p.sum()
    return float(((c - expected) ** 2 / expected).sum()), len(c) - 1


def chi_square_limit(df: int, checks: int = 1, alpha: float = FAMILY_ALPHA) -> float:
    return float(stats.chi2.isf(alpha / checks, df))


def smallest_effect(n: int, df: int, limit: float, power: float = POWER) -> float:
    """Cohen's w = sqrt(sum (p1 - p0)^2 / p0) that the chi-square test with `limit` catches with
    `power` after n draws: the statistic is then non-central chi-square with lambda = n w^2."""
    lam = optimize.brentq(lambda lam: stats.ncx2.sf(limit, df, lam) - power, 1e-6, 1e6)
    return float(np.sqrt(lam / n))


# --- Driving a bound rule's walk many times -------------------------------------------------------


def inverse_cdf(dist: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Vectorised draws from dist (V,) with uniforms (n,): (n,) tokens, never a zero-mass one."""
    cumulative = np.cumsum(dist)
    tokens = np.searchsorted(cumulative, uniforms * cumulative[-1], side="right")
    return np.minimum(tokens, len(dist) - 1)


def without_replacement(dist: np.ndarray, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """n rows of k tokens drawn one after another without replacement from dist (V,): the Gumbel
    top-k trick, whose i-th column is a draw from dist with the earlier columns removed."""
    keys = np.log(np.where(dist > 0, dist, 1e-300)) + rng.gumbel(size=(n, len(dist)))
    return np.argsort(-keys, axis=1)[:, :k]


def walk_outputs(bound, trees: list, probs: np.ndarray, uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """Walk trees[i] with uniforms[i]: the first and second output token of each walk (-1 where it
    produced one), and each walk's (tree node, accepted) tries in the order the rule made them."""
    n = len(trees)
    first, second = np.empty(n, np.int64), np.full(n, -1, np.int64)
    tries = []
    for i, tree in enumerate(trees):
        result = bound.walk(tree, probs, uniforms[i])
        drafted = tree.tokens.tolist()
        out = [drafted[node] for node in result.accepted_nodes] + [result.next_token]
        first[i] = out[0]
        if len(out) > 1:
            second[i] = out[1]
        tries.append([(v.node, v.accepted) for v in result.verdicts])
    return first, second, tries
