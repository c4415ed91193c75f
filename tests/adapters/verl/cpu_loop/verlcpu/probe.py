"""Records every call of advbudget's verl estimators (after ``advbudget.adapters.verl`` in
``VERL_USE_EXTERNAL_MODULES``): one JSON line per call, with the pid of the process verl
computed the advantage in, to ``$VERLCPU_PROBE_FILE``; for an estimator with memory also
each row's prompt key (as lent by the trainer), sequence reward and advantage, for a
replay; under verl's async trainers each row's weights label, the trainer's own labels
(read here from the trainer itself, not through advbudget) and each row's advantage on
every token. Without that variable: nothing."""

from __future__ import annotations

import functools
import json
import os
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
        record.update(_memory_call(rewards, mask, result))
        record.update(_async_call(mask, result))
        with open(str(PROBE_FILE), "a") as out:
            out.write(json.dumps(record) + "\n")
        return result

    probed._verlcpu_probe = True  # type: ignore[attr-defined]
    return probed


def _memory_call(rewards: Any, mask: Any, result: Any) -> dict[str, Any]:
    """The prompts lent to an estimator with memory, the sequence rewards and advantages
    (the advantage is the same on every response token); nothing for the others."""
    from advbudget.adapters import _features
    from advbudget.metrics import prompt_key

    lent = _features.lent_prompts()
    if lent is None:
        return {}
    advantages = (result[0] * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return {
        "prompt_ids": [prompt_key(p) for p in lent],
        "rewards": rewards.sum(-1).tolist(),
        "advantages": advantages.tolist(),
    }


def _async_call(mask: Any, result: Any) -> dict[str, Any]:
    """Under verl's async advantage step: the trainer, its labels, each row's weights label
    and its advantages' min and max over the response tokens; nothing elsewhere."""
    from advbudget.adapters.verl._hooks import async_advantage_step

    step = async_advantage_step()
    if step is None:
        return {}
    trainer, batch = step
    labels = batch.non_tensor_batch.get("max_global_steps")
    inside = mask.bool()
    advantages = result[0]
    return {
        "trainer": [cls.__name__ for cls in type(trainer).__mro__],
        "global_steps": int(trainer.global_steps),
        "current_param_version": getattr(trainer, "current_param_version", None),
        "labels": None if labels is None else [None if v is None else int(v) for v in labels],
        "advantage_min": advantages.masked_fill(~inside, float("inf")).min(-1).values.tolist(),
        "advantage_max": advantages.masked_fill(~inside, float("-inf")).max(-1).values.tolist(),
        "tokens": inside.sum(-1).tolist(),
    }


if PROBE_FILE:
    from verl.trainer.ppo import core_algos

    for _name, _fn in list(core_algos.ADV_ESTIMATOR_REGISTRY.items()):
        if (_name == "reward_budget" or _name.startswith("advbudget_")) and not getattr(
            _fn, "_verlcpu_probe", False
        ):
            core_algos.ADV_ESTIMATOR_REGISTRY[_name] = _wrap(_name, _fn)
