r"""The math-verify reward: parse both answers to SymPy and compare them mathematically.

math-verify is imported on first use (it takes a few hundred ms to import). Its timeouts
use ``signal.alarm``, which only works in the main thread: elsewhere (verl's and
OpenRLHF's reward threads, a thread pool) the timeouts are switched off, as math-verify
asks, so a pathological answer can take long there instead of raising.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any

from ._checks import check_answer, check_str

_PARSE_TIMEOUT_S = 5
_VERIFY_TIMEOUT_S = 5

MAX_RESPONSE_CHARS = 8192
"""math-verify reads at most the last 8192 characters of a response.

math-verify's extraction regexes are quadratic on degenerate text: unclosed ``\\[`` or
``\\(`` repeated cost 1.3 s at 8k characters, 4 s at 16k and 82 s at 64k (measured,
math-verify 0.9.0), and outside the main thread nothing times them out. The cap bounds
one call at what 8k characters cost, whatever the response's length. A response of at
most 8192 characters is graded exactly as before; a longer one as its last 8192
characters, which changes the grade only when math-verify's choice lies further back and
the tail holds no answer of the same or a higher priority (a ``\\boxed{}`` followed by
more than ~2k tokens of text without another one). The DAPO rule reads 300.
"""


def _math_verify() -> Any:
    # importlib rather than an import statement: math-verify ships no type hints, and
    # this keeps the import lazy and mypy independent of them.
    return importlib.import_module("math_verify")


def _timeouts() -> tuple[int | None, int | None]:
    """(parsing, verify) timeouts: math-verify's signal.alarm needs the main thread of a
    POSIX process (elsewhere it raises, or on Windows spawns a process per call)."""
    if os.name == "posix" and threading.current_thread() is threading.main_thread():
        return _PARSE_TIMEOUT_S, _VERIFY_TIMEOUT_S
    return None, None


def _parse_gold(mv: Any, gold: str, timeout: int | None) -> list[Any]:
    # A bare LaTeX gold parses wrongly or not at all ("3\sqrt{3}" -> 3, "\sqrt{2}" -> []):
    # math-verify's LaTeX extraction wants math delimiters, so give it some.
    text = gold if "$" in gold or "\\boxed" in gold else f"${gold}$"
    parsed: list[Any] = mv.parse(text, parsing_timeout=timeout)
    if not parsed and text != gold:
        parsed = mv.parse(gold, parsing_timeout=timeout)
    return parsed


def _describe(parsed: list[Any]) -> str | None:
    """The extracted answer as text: math-verify returns [sympy object, source string]."""
    if not parsed:
        return None
    text = parsed[-1]
    return text if isinstance(text, str) else str(parsed[0])


def grade_math_verify(response: str, ground_truth: str) -> tuple[bool, str | None]:
    """(correct, the answer math-verify extracted or None); arguments already checked."""
    mv = _math_verify()
    parse_timeout, verify_timeout = _timeouts()
    gold = _parse_gold(mv, ground_truth, parse_timeout)
    pred = mv.parse(response[-MAX_RESPONSE_CHARS:], parsing_timeout=parse_timeout)
    # Gold first: verify() is not symmetric (assignments like "x = 5" are simplified on
    # the prediction's side only).
    correct = (
        bool(gold) and bool(pred) and bool(mv.verify(gold, pred, timeout_seconds=verify_timeout))
    )
    return correct, _describe(pred)


def math_verify_reward(response: str, ground_truth: str) -> float:
    r"""1.0 if math-verify finds the response's answer equal to the ground truth, else 0.0.

    math-verify reads the whole response with its own extraction (``\boxed{}`` first, then
    "final answer"/``Answer:`` phrases, then the last expression) and compares the SymPy
    results, so ``1/2``, ``0.5`` and ``\frac{1}{2}`` agree and ``Answer: 34.`` is right.
    Unlike :func:`dapo_reward` it does not stop at the last 300 characters, but at the
    last 8192 (``MAX_RESPONSE_CHARS``: math-verify is quadratic on degenerate text). A ground
    truth without math delimiters is parsed as ``$...$``; one math-verify cannot parse
    at all scores 0.0. Works in any thread (see the module notes on timeouts).

    Args:
        response: the model's response text.
        ground_truth: the reference answer (a number, or LaTeX such as ``\frac{1}{2}``).

    Returns:
        1.0 or 0.0.

    Raises:
        TypeError: ``response`` or ``ground_truth`` is not a str.
        ValueError: ``ground_truth`` is empty.

    References:
        math-verify, https://github.com/huggingface/Math-Verify.

    Examples:
        >>> from advbudget.rewards import math_verify_reward
        >>> math_verify_reward(r"... so $x = \frac{1}{2}$.", "0.5")
        1.0
        >>> math_verify_reward("Answer: 34.", "34"), math_verify_reward("Answer: 35", "34")
        (1.0, 0.0)
    """
    check_str(response, "response")
    check_answer(ground_truth, "ground_truth")
    return 1.0 if grade_math_verify(response, ground_truth)[0] else 0.0
