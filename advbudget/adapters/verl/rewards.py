"""verl: ``compute_score`` for ``custom_reward_function``.

Point verl at this module (``pkg://`` in recent verl; a file path works everywhere, the
module imports ``advbudget`` absolutely) and function::

    custom_reward_function.path=pkg://advbudget.rewards.verl   # or /abs/path/to/rewards.py
    custom_reward_function.name=compute_score
    # options, passed on as keyword arguments:
    +custom_reward_function.reward_kwargs.method=math_verify   # default: dapo
    +custom_reward_function.reward_kwargs.wrong=0.0            # default: -1.0

Every ``data_source`` is graded the same way (by ``method``). The result is the dict
verl's reward managers expect: ``score`` becomes the reward, and every key is logged per
sample (``acc`` and ``pred`` feed verl's validation metrics ``mean@N`` and ``maj@N``).
``pred`` is always a str, ``""`` when no answer was found: verl's validation metrics skip
a key only when its first value is a str, and would fail on a ``None``.

Ground truths that are ints (or numpy ints) are graded as their decimal string.

**Overlong penalty.** DAPO's penalty needs the response length in *tokens*, which verl's
reward managers do not pass to ``compute_score``. The usual way is verl's own: the
``dapo`` reward manager adds it (``reward_model.reward_manager=dapo``,
``+reward_model.reward_kwargs.overlong_buffer_cfg.{enable,len,penalty_factor}`` and
``+reward_model.reward_kwargs.max_resp_len``). This ``compute_score`` adds it too, but
only from a real token count: with ``overlong_buffer`` and ``max_response_length`` set, it
needs ``response_length`` (a keyword, or ``extra_info["response_length"]``, e.g. from a
reward manager of your own) and raises without one; it never estimates tokens from the
text. Do not turn on both, or the penalty counts twice.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from advbudget.rewards._checks import as_ground_truth, check_answer, check_real, check_str
from advbudget.rewards._grade import Grade, check_method, grade
from advbudget.rewards._guard import guarded, reward_timeout
from advbudget.rewards._overlong import overlong_penalty

__all__ = ["compute_score"]

# Keywords verl itself may add to the call (reward-model routing, code sandboxes).
_VERL_KEYWORDS = frozenset(
    {
        "reward_router_address",
        "reward_model_tokenizer",
        "sandbox_fusion_url",
        "concurrent_semaphore",
        "memory_limit_mb",
    }
)


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: str | int,
    extra_info: Mapping[str, Any] | None = None,
    *,
    method: str = "dapo",
    correct: float = 1.0,
    wrong: float = -1.0,
    overlong_buffer: int | None = None,
    max_response_length: int | None = None,
    overlong_factor: float = 1.0,
    response_length: int | None = None,
    timeout: float | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Grade one response for verl: ``{"score": float, "acc": bool, "pred": str}``.

    Args:
        data_source: the sample's ``data_source`` (not used: every source is graded by
            ``method``).
        solution_str: the decoded response.
        ground_truth: ``reward_model.ground_truth``; an int is graded as its string.
        extra_info: the sample's ``extra_info``; only ``response_length`` is read from it.
        method: ``"dapo"`` or ``"math_verify"`` (see :func:`advbudget.rewards.is_correct`).
        correct, wrong: the score of a right and of a wrong or missing answer.
        overlong_buffer, max_response_length, overlong_factor: DAPO's overlong penalty in
            tokens (:func:`advbudget.rewards.overlong_penalty`); off unless both of the
            first two are given.
        response_length: the response's length in tokens, for the penalty.
        timeout: seconds the grader may take (default: ``ADVBUDGET_REWARD_TIMEOUT_S``, else
            10; 0: no timeout). A grader that raises or overruns scores ``wrong`` (plus the
            penalty) with ``reward_failure`` 1.0 (and ``reward_timeout`` 1.0 if it overran);
            the step goes on.
        **kwargs: keywords verl adds for other reward functions are ignored; unknown ones
            are ignored with a warning (a misspelt option would otherwise do nothing).

    Returns:
        ``score`` (``correct``/``wrong``, plus the penalty when on), ``acc`` (right or
        not), ``pred`` (the answer as graded, ``""`` if none), ``reward_failure`` and
        ``reward_timeout`` (1.0 when the grader raised / overran, else 0.0: every result
        has the same keys, as verl's validation metrics need), and ``overlong_penalty``
        when the penalty is on.

    Raises:
        TypeError: ``solution_str`` or ``ground_truth`` has the wrong type.
        ValueError: an empty ground truth, an unknown ``method``, or an incomplete
            overlong configuration.

    Examples:
        >>> from advbudget.adapters.verl.rewards import compute_score
        >>> compute_score("math_dapo", "... so x = 34.\\nAnswer: 34", "34")
        {'score': 1.0, 'acc': True, 'pred': '34', 'reward_failure': 0.0, 'reward_timeout': 0.0}
        >>> compute_score("math_dapo", "I am not sure.", 34, {"index": 0}, wrong=0.0)
        {'score': 0.0, 'acc': False, 'pred': '', 'reward_failure': 0.0, 'reward_timeout': 0.0}
        >>> compute_score("math_dapo", "Answer: 34", "34", overlong_buffer=512,
        ...               max_response_length=4096, response_length=3840)["overlong_penalty"]
        -0.5
    """
    for key in kwargs.keys() - _VERL_KEYWORDS:
        warnings.warn(
            f"compute_score: ignoring the unknown keyword {key!r}", UserWarning, stacklevel=2
        )
    method = check_method(method)
    correct = check_real(correct, "correct")
    wrong = check_real(wrong, "wrong")
    penalty = _overlong(
        extra_info, overlong_buffer, max_response_length, overlong_factor, response_length
    )

    truth = as_ground_truth(ground_truth)
    check_str(solution_str, "solution_str")
    check_answer(truth, "ground_truth")
    # Faults: the grader runs under a timeout; one that raises or overruns scores `wrong`.
    outcome = guarded(lambda: grade(solution_str, truth, method), reward_timeout(timeout), "verl")
    result = outcome.value if outcome.failure is None else Grade(False, None)
    score: dict[str, Any] = {
        "score": correct if result.correct else wrong,
        "acc": result.correct,
        "pred": result.answer or "",
        "reward_failure": 0.0 if outcome.failure is None else 1.0,
        "reward_timeout": 1.0 if outcome.failure == "timeout" else 0.0,
    }
    if penalty is not None:
        score["score"] += penalty
        score["overlong_penalty"] = penalty
    return score


def _overlong(
    extra_info: Mapping[str, Any] | None,
    overlong_buffer: int | None,
    max_response_length: int | None,
    overlong_factor: float,
    response_length: int | None,
) -> float | None:
    """The overlong penalty, or None when it is off."""
    if overlong_buffer is None and max_response_length is None:
        return None
    if overlong_buffer is None or max_response_length is None:
        missing = "overlong_buffer" if overlong_buffer is None else "max_response_length"
        raise ValueError(f"{missing}: expected a token count for the overlong penalty, got None")
    if response_length is None and isinstance(extra_info, Mapping):
        response_length = extra_info.get("response_length")
    if response_length is None:
        raise ValueError(
            "response_length: the overlong penalty needs the response length in tokens, "
            "got none (neither the keyword nor extra_info['response_length']); verl's "
            "reward managers do not pass it: use the dapo reward manager's overlong_buffer_cfg"
        )
    return overlong_penalty(response_length, max_response_length, overlong_buffer, overlong_factor)
