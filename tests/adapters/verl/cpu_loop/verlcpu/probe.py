"""Records every call of advbudget's verl estimators (after ``advbudget.adapters.verl`` in
``VERL_USE_EXTERNAL_MODULES``): one JSON line per call, with the pid of the process verl
computed the advantage in, to ``$VERLCPU_PROBE_FILE``. Each line has every row's uid,
sequence reward, the least and largest advantage over its response tokens (mask 1), its
token count and its assistant turns (runs of mask 1), and, under verl's V1 multi-output
advantage step, the batch's keys (read here from verl's frame, not through advbudget); for
an estimator with memory also each row's prompt key (as lent by the trainer), mean
advantage and (spo's rho=kl) ρ, for a replay; under verl's async trainers each row's
weights label and the trainer's own labels (read here from the trainer itself). Without
that variable: nothing."""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

PROBE_FILE = os.environ.get("VERLCPU_PROBE_FILE")


def _wrap(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def probed(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        rewards = kwargs.get("token_level_rewards", args[0] if args else None)
        record = {
            "estimator": name,
            "pid": os.getpid(),
            "function": f"{fn.__module__}.{fn.__qualname__}",
            "rows": int(rewards.shape[0]) if hasattr(rewards, "shape") else None,
        }
        mask = kwargs["response_mask"] if "response_mask" in kwargs else args[1]
        record.update(_rows(rewards, mask, result, kwargs.get("index")))
        record.update(_memory_call(rewards, mask, result))
        record.update(_async_call())
        with open(str(PROBE_FILE), "a") as out:
            out.write(json.dumps(record) + "\n")
        return result

    probed._verlcpu_probe = True  # type: ignore[attr-defined]
    return probed


def _rows(rewards: Any, mask: Any, result: Any, uids: Any) -> dict[str, Any]:
    """Each row's uid, sequence reward, advantage range over its response tokens, token
    count and assistant turns; the V1 trainer's batch keys when it split trajectories
    into several outputs (verl's ``compute_advantage_for_multi_trajectories``), else None."""
    inside = mask.bool()
    advantages = result[0]
    edges = inside.int().diff(dim=-1, prepend=inside.new_zeros(inside.shape[0], 1).int())
    return {
        "uids": None if uids is None else [str(uid) for uid in uids],
        "rewards": rewards.sum(-1).tolist(),
        "advantage_min": advantages.masked_fill(~inside, float("inf")).min(-1).values.tolist(),
        "advantage_max": advantages.masked_fill(~inside, float("-inf")).max(-1).values.tolist(),
        "tokens": inside.sum(-1).tolist(),
        "turns": (edges == 1).sum(-1).tolist(),
        "batch_keys": _batch_keys(),
    }


def _batch_keys() -> list[str] | None:
    """``batch_keys`` of verl's V1 multi-output advantage step on the call stack, if any."""
    module = sys.modules.get("verl.trainer.ppo.v1.utils")
    if module is None:
        return None
    code = module.compute_advantage_for_multi_trajectories.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return [str(key) for key in frame.f_locals["batch_keys"]]
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _memory_call(rewards: Any, mask: Any, result: Any) -> dict[str, Any]:
    """The prompts lent to an estimator with memory, the sequence rewards and advantages
    (the advantage is the same on every response token); nothing for the others."""
    from advbudget.adapters import _features
    from advbudget.metrics import prompt_key

    lent = _features.lent_prompts()
    if lent is None:
        return {}
    advantages = (result[0] * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    record = {"prompt_ids": [prompt_key(p) for p in lent], "advantages": advantages.tolist()}
    rho = _features.lent_rho()  # spo's ρ per row under rho=kl
    return record if rho is None else {**record, "rho": rho.tolist()}


def _async_call() -> dict[str, Any]:
    """Under verl's async advantage step: the trainer, its labels and each row's weights
    label; nothing elsewhere."""
    from advbudget.adapters.verl._hooks import async_advantage_step

    step = async_advantage_step()
    if step is None:
        return {}
    trainer, batch = step
    labels = batch.non_tensor_batch.get("max_global_steps")
    return {
        "trainer": [cls.__name__ for cls in type(trainer).__mro__],
        "global_steps": int(trainer.global_steps),
        "current_param_version": getattr(trainer, "current_param_version", None),
        "labels": None if labels is None else [None if v is None else int(v) for v in labels],
    }


if PROBE_FILE:
    from verl.trainer.ppo import core_algos

    for _name, _fn in list(core_algos.ADV_ESTIMATOR_REGISTRY.items()):
        if (_name == "reward_budget" or _name.startswith("advbudget_")) and not getattr(
            _fn, "_verlcpu_probe", False
        ):
            core_algos.ADV_ESTIMATOR_REGISTRY[_name] = _wrap(_name, _fn)
