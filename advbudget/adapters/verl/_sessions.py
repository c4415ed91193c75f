"""verl's multi-output agent loops: the outputs of one session are one trajectory.

An agent loop of verl's V1 trainer may return several outputs for one rollout (one per
assistant turn, ...). Each becomes a row of the batch, keyed ``{uid}_{session_id}_{index}``
(``verl/trainer/ppo/v1/agent_loop_tq.py:178-193``): ``uid`` the prompt, ``session_id``
the rollout of the prompt (``0..n-1``), ``index`` the output. verl's advantage step,
``compute_advantage_for_multi_trajectories`` (``verl/trainer/ppo/v1/utils.py:148``), counts
each session once for its own ``grpo`` only: it scores the final output of each session
(the highest index) and broadcasts that advantage to the session's other outputs
(``utils.py:178-205``); any other estimator gets every row as a rollout (``utils.py:168``).

Ours count each session once too, through the core's multi-turn rows
(``trajectory_ids=``): :func:`read_keys` turns the keys into one trajectory label per row,
``{uid}_{session_id}``, and marks each session's final output; :func:`final_rewards` keeps
the reward on that output only (NaN on the others: the core's one-reward-per-trajectory
rule), as verl's grpo reads it. With one output per session (verl's own loops) nothing of
this applies: :attr:`Sessions.split` is False and the rows are the rollouts. Under verl's
step a bad key stops it (:func:`read_keys`); the trainer's own reading of a step's batch
afterwards (metrics, κ_eff, ``resample``) takes keys that are not verl's as rows
(:func:`split_sessions`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._convention import VERL

#: What verl's V1 trainer keys each output with (agent_loop_tq.py:193).
KEY_FORMAT = "{uid}_{session_id}_{index}"


@dataclass(frozen=True)
class Sessions:
    """verl's V1 rows read as sessions (trajectories).

    Attributes:
        trajectory_ids: ``{uid}_{session_id}`` of each row: its trajectory.
        final: ``[N]`` bool, the row is its session's final output (the highest index).
    """

    trajectory_ids: list[str]
    final: np.ndarray

    @property
    def split(self) -> bool:
        """Whether some session has more than one output (else the rows are rollouts)."""
        return int(self.final.sum()) < len(self.trajectory_ids)


def read_keys(batch_keys: Sequence[str], uids: Sequence[Any] | None = None) -> Sessions:
    """The sessions of verl's V1 batch from its keys (``{uid}_{session_id}_{index}``,
    split from the right as verl's grpo path splits them, ``utils.py:182``), one per row.

    ``uids``: each row's ``non_tensor_batch["uid"]``; each key must start with its row's
    (the keys and the rows in the same order). Raises a one-line ValueError naming
    ``batch_keys`` for a key not of that form, a repeated key, a length that is not the
    rows' or a key of another row's uid.

    Examples:
        >>> sessions = read_keys(["p_0_0", "p_0_1", "p_1_0", "q_0_0"], ["p", "p", "p", "q"])
        >>> sessions.trajectory_ids, sessions.final.tolist(), sessions.split
        (['p_0', 'p_0', 'p_1', 'q_0'], [False, True, True, True], True)
        >>> read_keys(["p_0"])
        Traceback (most recent call last):
        ...
        ValueError: batch_keys: expected verl's '{uid}_{session_id}_{index}' ... got 'p_0' at row 0
    """
    keys = [str(key) for key in batch_keys]
    if uids is not None and len(uids) != len(keys):
        raise ValueError(
            f"batch_keys: expected one key per row of verl's batch ({len(uids)}), got {len(keys)}"
        )
    trajectories, outputs = [], []
    for row, key in enumerate(keys):
        fields = key.rsplit("_", 2)
        try:
            if len(fields) != 3:
                raise ValueError(key)
            outputs.append(int(fields[2]))
        except ValueError:
            raise ValueError(
                f"batch_keys: expected verl's '{KEY_FORMAT}' (index an integer) for each row, "
                f"got {key!r} at row {row}"
            ) from None
        if uids is not None and fields[0] != str(uids[row]):
            raise ValueError(
                f"batch_keys: expected row {row}'s key to start with its uid "
                f"{str(uids[row])!r} (non_tensor_batch['uid']; the keys in the rows' order), "
                f"got {key!r}"
            )
        trajectories.append(f"{fields[0]}_{fields[1]}")
    first: dict[str, int] = {}
    for row, key in enumerate(keys):
        if first.setdefault(key, row) != row:
            raise ValueError(
                f"batch_keys: expected each key once, got {key!r} at rows {first[key]} and {row}"
            )
    last: dict[str, int] = {}
    for trajectory, output in zip(trajectories, outputs, strict=True):
        last[trajectory] = max(last.get(trajectory, output), output)
    final = np.array(
        [last[t] == output for t, output in zip(trajectories, outputs, strict=True)], dtype=bool
    )
    return Sessions(trajectories, final)


def split_sessions(batch_keys: Sequence[str], uids: Sequence[Any] | None = None) -> Sessions | None:
    """:func:`read_keys` for the trainer's own reading of a step's batch, after verl's
    advantage step (metrics, κ_eff, resample): the sessions when some session has several
    outputs; None when each has one, or when the keys are not verl's V1 keys (the rows are
    then the rollouts, as before; under verl's step our estimators check the same keys
    strictly).

    Examples:
        >>> split_sessions(["p_0_0", "p_0_1"]).trajectory_ids
        ['p_0', 'p_0']
        >>> split_sessions(["p_0_0", "p_1_0"]) is None, split_sessions(["k0", "k1"]) is None
        (True, True)
    """
    try:
        sessions = read_keys(batch_keys, uids)
    except ValueError:
        return None
    return sessions if sessions.split else None


def final_rewards(rewards: Any, final: np.ndarray) -> Any:
    """``rewards`` (a ``[B]`` tensor or array, or a mapping of them: reward components)
    on each session's final output, NaN on its other outputs."""
    if isinstance(rewards, Mapping):
        return {key: final_rewards(value, final) for key, value in rewards.items()}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(rewards, torch.Tensor):
        keep = torch.as_tensor(final, device=rewards.device)
        return torch.where(keep, rewards, torch.full_like(rewards, float("nan")))
    values = np.asarray(rewards, dtype=np.float64)
    return np.where(final, values, np.nan)


def counts_sessions(adv_estimator: Any) -> bool:
    """Whether verl's multi-output step counts each session once with this estimator: ours,
    and verl's own ``grpo`` (``utils.py:168``); every other one of verl's scores each row."""
    name = str(getattr(adv_estimator, "value", adv_estimator))
    return name == "grpo" or name in VERL.names()


def trajectory_values(values: Any, final: np.ndarray, index: Any) -> np.ndarray:
    """One value per trajectory, from one per row: its final output's (``final``, as
    :attr:`Sessions.final`). ``index``: each row's trajectory in the core's result
    (``result.trajectories.index``).

    Examples:
        >>> trajectory_values([0.0, 1.0, 0.5], np.array([False, True, True]), [0, 0, 1])
        array([1. , 0.5])
    """
    host = np.asarray(values, dtype=np.float64)
    codes = np.asarray(index, dtype=np.int64)
    out = np.full(int(codes.max()) + 1 if codes.size else 0, np.nan)
    out[codes[final]] = host[final]
    return out
