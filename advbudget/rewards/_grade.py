"""One entry point for both graders, with the answer each one read (the wrappers log it)."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from ._checks import check_answer, check_str
from ._dapo import grade_dapo
from ._math_verify import grade_math_verify

Method = Literal["dapo", "math_verify"]
METHODS: tuple[Method, ...] = ("dapo", "math_verify")


class Grade(NamedTuple):
    correct: bool
    answer: str | None
    """The answer as graded (DAPO: normalised; math-verify: as extracted), None if none."""


def check_method(method: Any) -> Method:
    if isinstance(method, str) and method in METHODS:
        return "dapo" if method == "dapo" else "math_verify"
    raise ValueError(f"method: expected 'dapo' or 'math_verify', got {method!r}")


def grade(response: str, ground_truth: str, method: str) -> Grade:
    checked = check_method(method)
    check_str(response, "response")
    check_answer(ground_truth, "ground_truth")
    grader = grade_math_verify if checked == "math_verify" else grade_dapo
    return Grade(*grader(response, ground_truth))


def is_correct(response: str, ground_truth: str, *, method: str = "dapo") -> bool:
    r"""Whether a response's final answer is right, by DAPO's rule or by math-verify.

    Args:
        response: the model's response text.
        ground_truth: the reference answer.
        method: ``"dapo"`` (:func:`dapo_reward`: the last ``Answer:`` line, exact match
            after normalisation) or ``"math_verify"`` (:func:`math_verify_reward`).

    Returns:
        True if the answer is right.

    Raises:
        TypeError: ``response`` or ``ground_truth`` is not a str.
        ValueError: ``ground_truth`` is empty, or ``method`` is unknown.

    Examples:
        >>> from advbudget.rewards import is_correct
        >>> is_correct("Answer: 1/2", r"\frac{1}{2}")  # DAPO compares strings
        False
        >>> is_correct("Answer: 1/2", r"\frac{1}{2}", method="math_verify")
        True
    """
    return grade(response, ground_truth, method).correct
