"""A reward with variance inside groups, for CPU loop runs (``reward.custom_reward_function
.path``). A random tiny model never solves a DAPO problem: the math reward is -1 for every
response, every group has zero advantage (skipped by reward budgeting) and κ_eff has no
pairs. This scores the parity of a hash (crc32, not Python's salted ``hash``) of the
response text and of the call's number in this process: about half of a group's responses
get 1, the rest 0, even when the policy has come to repeat one response (a parity of the
text alone lets a few updates make whole groups constant)."""

from __future__ import annotations

import collections
import itertools
import threading
import zlib
from collections.abc import Iterable
from typing import Any

_calls = itertools.count()
_calls_per_answer: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()  # verl's reward loop scores in an executor's threads


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    dead_prompts: bool = False,
    dead_answers: Iterable[Any] | None = None,
    **_: Any,
) -> float:
    """``dead_prompts`` (``+reward.custom_reward_function.reward_kwargs.dead_prompts=true``):
    the problems whose answer has an even crc32 score 1 for every response (dead groups,
    for ``skipped_groups=drop``).

    ``dead_answers`` (``...reward_kwargs.dead_answers=[77,-20]``): exactly these problems
    are dead, and every other group is mixed for sure: a problem's responses score the
    parity of its own call count in this process (``reward.num_workers=1``), so any 2
    consecutive responses of one group differ. Which groups a step evicts is then fixed."""
    answer = str(ground_truth)
    if dead_answers is not None:
        if answer in {str(a) for a in dead_answers}:
            return 1.0
        with _lock:
            _calls_per_answer[answer] += 1
            return float(_calls_per_answer[answer] % 2)
    if dead_prompts and zlib.crc32(answer.encode()) % 2 == 0:
        return 1.0
    return float(zlib.crc32(f"{next(_calls)}:{solution_str}".encode()) % 2)
