"""A reward with variance inside groups, for CPU loop runs (``reward.custom_reward_function
.path``). A random tiny model never solves a DAPO problem: the math reward is -1 for every
response, every group has zero advantage (skipped by reward budgeting) and κ_eff has no
pairs. This scores the parity of a hash (crc32, not Python's salted ``hash``) of the
response text and of the call's number in this process: about half of a group's responses
get 1, the rest 0, even when the policy has come to repeat one response (a parity of the
text alone lets a few updates make whole groups constant)."""

from __future__ import annotations

import itertools
import zlib
from typing import Any

_calls = itertools.count()


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    dead_prompts: bool = False,
    **_: Any,
) -> float:
    """``dead_prompts`` (``+reward.custom_reward_function.reward_kwargs.dead_prompts=true``):
    the problems whose answer has an even crc32 score 1 for every response (dead groups,
    for ``skipped_groups=drop``)."""
    if dead_prompts and zlib.crc32(str(ground_truth).encode()) % 2 == 0:
        return 1.0
    return float(zlib.crc32(f"{next(_calls)}:{solution_str}".encode()) % 2)
