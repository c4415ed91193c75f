"""OpenRLHF: a reward file for ``--reward.remote_url`` (``--remote_rm_url`` before 0.10.2).

Give OpenRLHF the path of this file and the dataset column with the answers::

    --reward.remote_url /abs/path/to/advbudget/adapters/openrlhf/rewards.py --data.label_key label

(``advbudget/rewards/openrlhf.py``, its earlier path, still loads it.)

OpenRLHF loads it by path and calls ``reward_func(queries, prompts, labels)`` (in a
worker thread, often one sample at a time). It imports ``advbudget.rewards``, so advbudget
must be installed where OpenRLHF runs.

Options, as environment variables read at each call:

- ``ADVBUDGET_REWARD_METHOD``: ``dapo`` (default: DAPO's ``Answer:`` rule) or
  ``math_verify``;
- ``ADVBUDGET_REWARD_CORRECT``, ``ADVBUDGET_REWARD_WRONG``: the reward of a right and of a
  wrong answer (defaults 1.0 and -1.0, as DAPO).

What it returns: ``rewards`` (right/wrong, for the advantages), ``scores`` (1.0/0.0
accuracy, what OpenRLHF's dynamic filtering reads) and ``extra_logs`` with per-sample
``accuracy`` and ``reward_error`` (OpenRLHF averages them into its logs).

It never raises: OpenRLHF would turn an exception into missing rewards for the whole call.
A sample that cannot be graded (no label, a query that is not a string, a bad option)
gets the wrong-answer reward and ``reward_error`` 1, and the first few such errors are
logged. A grader that raises, or does not return within ``ADVBUDGET_REWARD_TIMEOUT_S``
seconds (default 10; a thread join, since this runs in OpenRLHF's worker threads), is such
a sample too, and also counts in ``extra_logs["advbudget/reward_failures"]`` (and
``["advbudget/reward_timeouts"]`` when it overran): per-sample 0/1, so OpenRLHF logs the
fraction of the step's samples. Labels that are ints are graded as their decimal string.

The response is ``query[len(prompt):]`` when the query starts with the prompt, else the
whole query. OpenRLHF decodes queries with their special tokens, so a trailing
``<|im_end|>``, ``<|endoftext|>``, ``</s>`` ... is cut off first (otherwise
``Answer: 34<|im_end|>`` would not read as 34).

Overlong penalty: OpenRLHF applies DAPO's penalty itself, from token counts
(``--reward.overlong_buffer_len``, ``--reward.overlong_penalty_factor``); use that.
``reward_func`` adds it only when called with token counts, which OpenRLHF does not pass:
keywords ``response_lengths`` (one per query), ``max_response_length``,
``overlong_buffer`` and ``overlong_factor``; never from the text's length.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from advbudget.rewards._checks import as_ground_truth, check_count, check_real, describe
from advbudget.rewards._grade import check_method, grade
from advbudget.rewards._guard import DEFAULT_TIMEOUT_S, guarded, reward_timeout
from advbudget.rewards._overlong import overlong_penalty

__all__ = ["reward_func"]

# The logger's name from the earlier path, which users filter on (docs/guides/openrlhf.md).
_logger = logging.getLogger("advbudget.rewards.openrlhf")
_MAX_LOGGED_ERRORS = 10
_errors_logged = 0
_errors_lock = threading.Lock()
REWARD_FAILURES = "advbudget/reward_failures"
REWARD_TIMEOUTS = "advbudget/reward_timeouts"

# End-of-turn and end-of-text markers of the common chat templates: <|im_end|>,
# <|endoftext|>, <|eot_id|>, DeepSeek's <｜end▁of▁sentence｜>, </s>, <eos>, <end_of_turn>.
# The same tokens spelt backwards, to read a response from its end: a regex matched once
# at the start of the reversed text (re.match) is one attempt, not one per start position.
_REVERSED_TRAILER = re.compile(
    r"\s*(?:(?:>\|[^<>|\n]{1,64}\|<|>｜[^<>｜\n]{1,64}｜<|>s/<|>soe<|>nrut_fo_dne<)\s*)+"
)


def _strip_trailing_special_tokens(text: str) -> str:
    r"""``re.sub(r"(?:\s*TOKEN)+\s*\Z", "", text)``, in time linear in the text.

    That regex, searched as it is, tries every start position and rescans the tail from
    each: quadratic on a long run of whitespace with no token at its end (a rollout cut at
    the length cap: 13 s at 64k newlines). Its match is the longest suffix made of
    whitespace and at least one token, so match the reversed pattern once at the start of
    the reversed text instead. The parse from the end has no choice to make (a token ends
    with ``>``, whitespace never does, and a token's inner characters exclude ``<``, ``|``
    and ``｜``, so the token ending at a ``>`` is unique): the single anchored match finds
    exactly the suffix the regex removes, with no backtracking beyond one token.
    """
    match = _REVERSED_TRAILER.match(text[::-1])
    return text if match is None else text[: len(text) - match.end()]


# A NamedTuple, not a dataclass: dataclasses look their module up in sys.modules, and
# OpenRLHF loads this file without registering it there.
class _Settings(NamedTuple):
    method: str = "dapo"
    correct: float = 1.0
    wrong: float = -1.0
    lengths: Sequence[Any] | None = None
    max_length: int = 0
    buffer: int = 0
    factor: float = 1.0
    timeout: float = DEFAULT_TIMEOUT_S


class _GraderFailure(Exception):
    """The grader raised or overran (``kind``: ``"error"`` or ``"timeout"``)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"the grader failed ({kind})")
        self.kind = kind


def reward_func(
    queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
) -> dict[str, Any]:
    """Grade each query's response against its label; never raises.

    Args:
        queries: prompt + response strings, as OpenRLHF decodes them.
        prompts: the prompts, to cut the response out of each query.
        labels: the ground truths (``--data.label_key``); ints are graded as strings.
        **kwargs: ``response_lengths`` (token counts), ``max_response_length``,
            ``overlong_buffer``, ``overlong_factor`` for the overlong penalty; others are
            ignored.

    Returns:
        ``{"rewards": tensor, "scores": tensor, "extra_logs": {"accuracy": tensor,
        "reward_error": tensor, "advbudget/reward_failures": tensor,
        "advbudget/reward_timeouts": tensor}}``, float32 tensors of one value per query
        (``extra_logs`` also has ``overlong_penalty`` when the penalty is on).

    Examples:
        >>> from advbudget.adapters.openrlhf.rewards import reward_func
        >>> prompt = "Solve 30 + 4. "
        >>> out = reward_func([prompt + "Answer: 34<|im_end|>", prompt + "Answer: 35", prompt],
        ...                   [prompt, prompt, prompt], ["34", 34, None])
        >>> out["rewards"], out["scores"], out["extra_logs"]["reward_error"]
        (tensor([ 1., -1., -1.]), tensor([1., 0., 0.]), tensor([0., 0., 1.]))
    """
    import torch

    try:
        count = len(queries)
    except Exception as error:
        _log_error("queries unusable, no rewards", error)
        count = 0
    try:
        settings: _Settings | None = _read_settings(kwargs, count)
    except Exception as error:
        _log_error("settings unusable, every sample scored as wrong", error)
        settings = None
    wrong = _wrong_reward() if settings is None else settings.wrong

    rewards, scores, errors, penalties = [], [], [], []
    failures, timeouts = [], []
    for i in range(count):
        failed = timed_out = 0.0
        if settings is not None:
            try:
                reward, right, penalty = _score_one(queries, prompts, labels, i, settings)
            except _GraderFailure as failure:  # logged by the guard
                failed, timed_out = 1.0, float(failure.kind == "timeout")
            except Exception as error:
                _log_error(f"sample {i} scored as wrong", error)
            else:
                failures.append(0.0)
                timeouts.append(0.0)
                rewards.append(reward)
                scores.append(1.0 if right else 0.0)
                errors.append(0.0)
                penalties.append(penalty)
                continue
        rewards.append(wrong)
        scores.append(0.0)
        errors.append(1.0)
        penalties.append(0.0)
        failures.append(failed)
        timeouts.append(timed_out)

    def tensor(values: list[float]) -> Any:
        return torch.tensor(values, dtype=torch.float32)

    extra_logs = {
        "accuracy": tensor(scores),
        "reward_error": tensor(errors),
        REWARD_FAILURES: tensor(failures),
        REWARD_TIMEOUTS: tensor(timeouts),
    }
    if settings is not None and settings.lengths is not None:
        extra_logs["overlong_penalty"] = tensor(penalties)
    return {"rewards": tensor(rewards), "scores": tensor(scores), "extra_logs": extra_logs}


def _read_settings(kwargs: dict[str, Any], count: int) -> _Settings:
    method = check_method(os.environ.get("ADVBUDGET_REWARD_METHOD", "dapo"))
    correct = _float_from_env("ADVBUDGET_REWARD_CORRECT", 1.0)
    wrong = _float_from_env("ADVBUDGET_REWARD_WRONG", -1.0)
    timeout = reward_timeout()
    lengths = kwargs.get("response_lengths")
    max_length = kwargs.get("max_response_length")
    buffer = kwargs.get("overlong_buffer")
    if lengths is None and max_length is None and buffer is None:
        return _Settings(method, correct, wrong, timeout=timeout)
    # Tokens only: a penalty configured without token counts is an error, not a guess.
    if lengths is None or max_length is None or buffer is None:
        raise ValueError(
            "response_lengths, max_response_length, overlong_buffer: expected all three "
            f"for the overlong penalty, got {lengths!r}, {max_length!r}, {buffer!r}"
        )
    if not isinstance(lengths, Sequence) or len(lengths) != count:
        raise ValueError(
            f"response_lengths: expected one token count per query ({count}), "
            f"got {describe(lengths)}"
        )
    factor = kwargs.get("overlong_factor", 1.0)
    overlong_penalty(0, max_length, buffer, factor)  # check the settings once
    return _Settings(method, correct, wrong, lengths, max_length, buffer, factor, timeout)


def _wrong_reward() -> float:
    try:
        return _float_from_env("ADVBUDGET_REWARD_WRONG", -1.0)
    except ValueError:
        return -1.0


def _float_from_env(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {text!r}") from None
    return check_real(value, name)


def _score_one(
    queries: Sequence[Any],
    prompts: Sequence[Any],
    labels: Sequence[Any],
    i: int,
    settings: _Settings,
) -> tuple[float, bool, float]:
    """(reward, right, overlong penalty) of sample i; raises on anything unusable."""
    query = queries[i]
    if not isinstance(query, str):
        raise TypeError(f"queries[{i}]: expected a str, got {describe(query)}")
    try:
        prompt = prompts[i]
    except Exception:  # no usable prompt: grade the whole query
        prompt = None
    response = (
        query[len(prompt) :] if isinstance(prompt, str) and query.startswith(prompt) else query
    )
    response = _strip_trailing_special_tokens(response)
    label = as_ground_truth(labels[i])
    if not isinstance(label, str):
        raise TypeError(f"labels[{i}]: expected a str or an int, got {describe(label)}")
    # Faults: the grader runs under a timeout (a thread join: this runs in OpenRLHF's
    # asyncio.to_thread workers, where signals do not work); a raise or an overrun fails.
    outcome = guarded(
        lambda: grade(response, label, settings.method), settings.timeout, f"sample {i}"
    )
    if outcome.failure is not None:
        raise _GraderFailure(outcome.failure)
    right = outcome.value.correct
    penalty = 0.0
    if settings.lengths is not None:
        length = check_count(settings.lengths[i], f"response_lengths[{i}]")
        penalty = overlong_penalty(length, settings.max_length, settings.buffer, settings.factor)
    return (settings.correct if right else settings.wrong) + penalty, right, penalty


def _log_error(what: str, error: Exception) -> None:
    global _errors_logged
    with _errors_lock:
        _errors_logged += 1
        number = _errors_logged
    if number <= _MAX_LOGGED_ERRORS:
        more = " (no more will be logged)" if number == _MAX_LOGGED_ERRORS else ""
        _logger.warning("reward_func: %s: %s: %s%s", what, type(error).__name__, error, more)
