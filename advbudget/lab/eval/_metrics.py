"""avg@k and unbiased pass@k, the paper's two evaluation numbers (docs: Reproducing the paper)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check_counts(n: int, c: int, k: int | None = None) -> None:
    for name, value in (("n", n), ("c", c)) + ((("k", k),) if k is not None else ()):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if n < 1:
        raise ValueError(f"n: expected at least one sample per problem, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c: expected a count of correct samples in 0..{n}, got {c}")
    if k is not None and not 1 <= k <= n:
        raise ValueError(f"k: expected 1 <= k <= n = {n} samples per problem, got {k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from ``n`` samples of which ``c`` are correct.

    The probability that ``k`` samples drawn without replacement from the ``n`` contain
    at least one correct one: ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021), computed
    as a stable product.

    Examples:
        >>> from advbudget.lab.eval import pass_at_k
        >>> pass_at_k(8, 1, 1), pass_at_k(8, 1, 8), round(pass_at_k(8, 2, 4), 4)
        (0.125, 1.0, 0.7857)
    """
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1 - k / i for i in range(n - c + 1, n + 1))


def avg_at_k(correct: Sequence[int], n: int) -> float:
    """avg@n: the mean over problems of the fraction of correct samples (``c / n``).

    Args:
        correct: the number of correct samples of each problem.
        n: samples per problem.

    Examples:
        >>> from advbudget.lab.eval import avg_at_k
        >>> avg_at_k([8, 4, 0], n=8)
        0.5
    """
    if not correct:
        raise ValueError("correct: expected at least one problem, got none")
    for c in correct:
        _check_counts(n, c)
    return sum(correct) / (n * len(correct))


def mean_pass_at_k(correct: Sequence[int], n: int, k: int) -> float:
    """pass@k averaged over problems.

    Examples:
        >>> from advbudget.lab.eval import mean_pass_at_k
        >>> mean_pass_at_k([0, 1, 8], n=8, k=8)
        0.6666666666666666
    """
    if not correct:
        raise ValueError("correct: expected at least one problem, got none")
    return sum(pass_at_k(n, c, k) for c in correct) / len(correct)
