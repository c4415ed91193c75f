r"""tunix: a DAPO reward whose import also registers the advbudget estimators.

For tunix's CLI, which imports each ``reward_functions`` entry as a module and takes every
public function defined in it as a reward function (``advbudget.rewards.tunix``, the path
the docs give, is an alias of this module)::

    python -m tunix.cli.grpo_main base_config.yaml \
      reward_functions="['advbudget.rewards.tunix']" \
      grpo_config.advantage_estimator=reward_budget

tunix evaluates the reward functions before it builds ``GrpoConfig``, so the estimators
exist when the config names one. Options: ``ADVBUDGET_TUNIX_OPTIONS`` (see
:mod:`advbudget.adapters.tunix`).

The one reward here, :func:`dapo_accuracy`, reads the dataset's ``answer`` column (what
tunix's GSM8K data gives) and scores 1.0 right, 0.0 wrong (DAPO's rule); a missing ground
truth scores NaN, which tunix 0.1.7's reward manager turns into 0 (it sums the reward
functions with ``np.nansum``) before any estimator sees it: check the data for missing
answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import advbudget.adapters.tunix as _adapter  # registers the estimators  # noqa: F401
from advbudget.rewards._checks import as_ground_truth as _as_ground_truth
from advbudget.rewards._grade import grade as _grade

__all__ = ["dapo_accuracy"]


def dapo_accuracy(
    prompts: Sequence[Any], completions: Sequence[str], answer: Sequence[Any], **kwargs: Any
) -> list[float]:
    r"""DAPO's rule as a tunix reward: 1.0 if the last ``Answer:`` line is right, else 0.0.

    Examples:
        >>> from advbudget.adapters.tunix.rewards import dapo_accuracy
        >>> dapo_accuracy(["q", "q", "q"], ["...\nAnswer: 34", "Answer: 3", "x"], ["34", 34, None])
        [1.0, 0.0, nan]
    """
    if len(completions) != len(answer):
        raise ValueError(
            f"answer: expected one ground truth per completion ({len(completions)}), "
            f"got {len(answer)}"
        )
    out = []
    for completion, truth in zip(completions, answer, strict=True):
        truth = _as_ground_truth(truth)
        if truth is None or not str(truth).strip():
            out.append(float("nan"))
            continue
        out.append(1.0 if _grade(str(completion), str(truth), "dapo").correct else 0.0)
    return out
