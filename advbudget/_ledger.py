"""A per-prompt ledger over a run: which recurring prompts were never, or always, solved.

One batch's ``unsolved_group_fraction`` cannot tell a prompt that stays out of reach from a
run that is merely early; the ledger can, because prompts recur across epochs. It keeps,
per prompt identity, how often its group was seen and whether it was ever other than
unsolved or other than solved: a 64-bit key and one small int, so memory is O(prompts)
(about 100 bytes a prompt in a dict) and an update is O(batch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .checks import int_at_least
from .core._arrays import as_array, to_host
from .core._state import prompt_key

__all__ = ["LEDGER_KEYS", "PromptLedger", "prompt_key"]

#: The metrics :meth:`PromptLedger.metrics` returns.
LEDGER_KEYS = ("never_solved_prompt_fraction", "always_solved_prompt_fraction", "recurring_prompts")

# One int per prompt: bits 0-1 the times seen (capped at 2, all the metrics need), bit 2
# "some group of it was not unsolved", bit 3 "some group of it was not solved".
_SEEN_MASK = 0b0011
_NOT_UNSOLVED = 0b0100
_NOT_SOLVED = 0b1000
_STATE_VERSION = 1


class PromptLedger:
    """Per prompt, over a run: was its group ever solved (some rollout reached
    ``solved_reward``), was it ever fully solved.

    Among prompts seen at least twice (``recurring_prompts``),
    ``never_solved_prompt_fraction`` is the share whose group was unsolved every time (no
    rollout ever reached ``solved_reward``) and ``always_solved_prompt_fraction`` the share
    whose group was solved by every rollout every time. A large and flat never-solved
    fraction is the persistent regime, where reward budgeting helps; one that falls to 0
    is the transient one. Groups with no reward at all (every rollout NaN) are not counted.

    ``max_prompts`` bounds the memory: prompts first seen after the ledger holds that many
    are not tracked (``untracked_prompts`` counts their groups).

    Examples:
        >>> import numpy as np
        >>> from advbudget import compute_advantages
        >>> from advbudget.metrics import PromptLedger, group_outcomes
        >>> ledger = PromptLedger()
        >>> for step in range(2):  # prompt "a" never solved, "b" always, "c" mixed
        ...     result = compute_advantages(
        ...         np.array([0.0, 0.0, 1.0, 1.0, 1.0, 0.0]), "budget", group_size=2
        ...     )
        ...     ledger.update(["a", "b", "c"], group_outcomes(result))
        >>> metrics = ledger.metrics()
        >>> metrics["never_solved_prompt_fraction"], metrics["recurring_prompts"]
        (0.333..., 3.0)
    """

    def __init__(self, max_prompts: int = 10_000_000) -> None:
        self.max_prompts = int_at_least("max_prompts", max_prompts, 1)
        self._codes: dict[int, int] = {}
        self.untracked_prompts = 0

    def __len__(self) -> int:
        return len(self._codes)

    def update(self, prompts: Sequence[Any], outcomes: Any) -> None:
        """Record one batch: ``prompts[m]`` is the identity of group m (anything
        :func:`prompt_key` takes), ``outcomes`` the batch's
        :func:`~advbudget.metrics.group_outcomes`."""
        solved, unsolved, scored = (
            _host_bools(array, name) for array, name in zip(outcomes, _OUTCOME_NAMES, strict=True)
        )
        if not len(solved) == len(unsolved) == len(scored) == len(prompts):
            raise ValueError(
                f"prompts: expected one identity per group ({len(scored)} groups), got "
                f"{len(prompts)}"
            )
        codes = self._codes
        rows = zip(prompts, solved, unsolved, scored, strict=True)
        for prompt, is_solved, is_unsolved, is_scored in rows:
            if not is_scored:
                continue
            key = prompt_key(prompt)
            code = codes.get(key)
            if code is None:
                if len(codes) >= self.max_prompts:
                    self.untracked_prompts += 1
                    continue
                code = 0
            seen = min((code & _SEEN_MASK) + 1, 2)
            code = (code & ~_SEEN_MASK) | seen
            if not is_unsolved:
                code |= _NOT_UNSOLVED
            if not is_solved:
                code |= _NOT_SOLVED
            codes[key] = code

    def metrics(self) -> dict[str, float]:
        """``never_solved_prompt_fraction`` and ``always_solved_prompt_fraction`` among the
        prompts seen at least twice (NaN while there are none), and ``recurring_prompts``,
        their number."""
        recurring = never = always = 0
        for code in self._codes.values():
            if code & _SEEN_MASK < 2:
                continue
            recurring += 1
            never += not code & _NOT_UNSOLVED
            always += not code & _NOT_SOLVED
        if not recurring:
            return dict.fromkeys(LEDGER_KEYS[:2], math.nan) | {"recurring_prompts": 0.0}
        return {
            "never_solved_prompt_fraction": never / recurring,
            "always_solved_prompt_fraction": always / recurring,
            "recurring_prompts": float(recurring),
        }

    def state_dict(self) -> dict[str, Any]:
        """A JSON-ready copy of the ledger, for a checkpoint."""
        return {
            "version": _STATE_VERSION,
            "keys": list(self._codes),
            "codes": list(self._codes.values()),
            "untracked_prompts": self.untracked_prompts,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the ledger by one saved with :meth:`state_dict`."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"state: expected a PromptLedger state of version {_STATE_VERSION}, got "
                f"version {state.get('version')!r}"
            )
        keys, codes = state["keys"], state["codes"]
        if len(keys) != len(codes):
            raise ValueError(f"state: {len(keys)} keys but {len(codes)} codes")
        self._codes = dict(zip(map(int, keys), map(int, codes), strict=True))
        self.untracked_prompts = int(state.get("untracked_prompts", 0))


_OUTCOME_NAMES = ("outcomes.solved", "outcomes.unsolved", "outcomes.scored")


def _host_bools(values: Any, name: str) -> list[bool]:
    array, _ = as_array(values, name)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {tuple(array.shape)}")
    return to_host(array).astype(bool).tolist()  # type: ignore[no-any-return]
