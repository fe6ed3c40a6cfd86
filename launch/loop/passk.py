"""The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models Trained on
Code", eq. 1) and its mean over problems.

For one problem with ``n`` samples of which ``c`` pass, the probability that at least one of
``k`` samples drawn without replacement passes is ``1 - C(n-c, k) / C(n, k)``. The binomials
overflow floats for large n, so it is computed as the paper's numerically stable product
``1 - prod_{i=n-c+1}^{n} (1 - k / i)``. Sampling ``n > k`` and estimating is less noisy than
drawing exactly ``k``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Estimated pass@k of one problem with ``c`` passing samples out of ``n``."""
    if not 0 <= c <= n:
        raise ValueError(f"passing samples ({c}) must be between 0 and the sample count ({n})")
    if not 1 <= k <= n:
        raise ValueError(f"k ({k}) must be between 1 and the sample count ({n})")
    if n - c < k:
        return 1.0  # every draw of k samples contains a passing one
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(counts: Iterable[tuple[int, int]], ks: Sequence[int]) -> dict[int, float]:
    """Mean pass@k over problems given ``(n, c)`` per problem, for every ``k`` in ``ks``.

    A problem with fewer than ``k`` samples (some were lost to sandbox infra errors) has no
    estimate for that ``k`` and is left out of its mean rather than counted as a failure; a
    ``k`` no problem can estimate is reported as NaN.
    """
    counts = list(counts)
    means: dict[int, float] = {}
    for k in ks:
        values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
        means[k] = sum(values) / len(values) if values else math.nan
    return means


def parse_ks(text: str) -> list[int]:
    """``"1,10"`` -> ``[1, 10]``: sorted, deduplicated, each at least 1."""
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"k values must be integers separated by commas, not {text!r}") from None
    if not ks or ks[0] < 1:
        raise ValueError(f"k values must be at least 1, got {text!r}")
    return ks
