"""Every reward path is linear in the response length (or bounded to the tail it reads).

Degenerate rollouts (whitespace runs, end tokens repeated, ``\\boxed{`` never closed, ...)
are timed at 16k, 64k and 256k characters, best of 3, and the growth exponent (log-log
slope, times floored at 1 ms so that sub-millisecond noise reads as flat) must stay under
1.5: a quadratic path gives ~2. No wall-clock limit is asserted; a path that is already
far over the bound at 64k fails there, before the slow 256k call.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import pytest

from advbudget.adapters.openrlhf.rewards import _strip_trailing_special_tokens
from advbudget.adapters.trl.rewards import dapo_accuracy
from advbudget.adapters.verl.rewards import compute_score
from advbudget.rewards import dapo_reward, math_verify_reward

SIZES = (16_000, 64_000, 256_000)
MAX_EXPONENT = 1.5
FLOOR_S = 1e-3


def _repeat(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


RESPONSES: dict[str, Callable[[int], str]] = {
    "newlines": lambda n: "\n" * n,
    "spaces": lambda n: " " * n,
    "im_end": lambda n: _repeat("<|im_end|>", n),
    "im_end then newlines": lambda n: _repeat("<|im_end|>", n // 2) + "\n" * (n - n // 2),
    "nested boxed": lambda n: _repeat("\\boxed{", n),
    "answer": lambda n: _repeat("Answer:", n),
    "dollars": lambda n: "$" * n,
}


def _best(call: Callable[[str], object], text: str) -> float:
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        call(text)
        best = min(best, time.perf_counter() - start)
        if best > 0.2:  # slow enough that noise does not matter
            break
    return max(best, FLOOR_S)


def _exponent(call: Callable[[str], object], make: Callable[[int], str]) -> float:
    call(make(1000))  # warm up
    first = _best(call, make(SIZES[0]))
    slope = 0.0
    for n in SIZES[1:]:
        slope = math.log(_best(call, make(n)) / first) / math.log(n / SIZES[0])
        if slope > MAX_EXPONENT + 0.5:
            break  # clearly super-linear already: do not wait for the bigger size
    return slope


PATHS: dict[str, Callable[[str], object]] = {
    "openrlhf trailing tokens": _strip_trailing_special_tokens,
    "dapo_reward": lambda r: dapo_reward(r, "34"),
    "verl compute_score": lambda r: compute_score("math_dapo", r, "34"),
    "trl dapo_accuracy": lambda r: dapo_accuracy([r], ["34"]),
    "math_verify_reward": lambda r: math_verify_reward(r, "34"),
}


@pytest.mark.parametrize("kind", sorted(RESPONSES))
@pytest.mark.parametrize("path", sorted(PATHS))
def test_reward_time_grows_at_most_linearly(path, kind, caplog):
    if path == "math_verify_reward":
        pytest.importorskip("math_verify")
    caplog.set_level(logging.ERROR)
    slope = _exponent(PATHS[path], RESPONSES[kind])
    assert slope <= MAX_EXPONENT, f"{path} on {kind}: time grows as n^{slope:.2f}"


def test_openrlhf_reward_func_time_grows_at_most_linearly():
    pytest.importorskip("torch")
    from advbudget.adapters.openrlhf.rewards import reward_func

    def call(response: str) -> object:
        return reward_func(["Q: " + response], ["Q: "], ["34"])

    for kind in ("newlines", "im_end then newlines"):
        slope = _exponent(call, RESPONSES[kind])
        assert slope <= MAX_EXPONENT, f"reward_func on {kind}: time grows as n^{slope:.2f}"
