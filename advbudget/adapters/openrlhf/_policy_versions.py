"""Which policy sampled each OpenRLHF rollout, for the staleness rules (async training).

A policy version is the number of updates the weights have had: OpenRLHF's ``global_step``
when they were last sent to the vLLM engines. The trainer publishes it each time it sends
them (``broadcast_to_vllm``); the samples generator stamps the published version on each
sample it generates (``experience.info``); the advantage step takes the stamps and compares
them with the version published last, the weights being updated (a step's advantages are
computed before its update, and every update is sent before the next step starts,
``ppo_trainer.py:241-247``).

Trainer and generator are separate Ray actors in async training (``ppo_trainer_async.py``),
so the version lives in one small named actor of the job; without Ray (one process), in
this module.

Exact in OpenRLHF's async mode: the generator holds the vLLM lock through a whole
generation round (``ppo_trainer_async.py:130-140``) and the trainer publishes inside the
same lock (``TrainingActor.broadcast_to_vllm`` takes it around
``BasePPOTrainer.broadcast_to_vllm``, whose wrapper publishes). With
``--train.partial_rollout_enable`` generation runs without the lock and a sample's tokens
may span a weight sync: its stamp is the version when its generation round began, the oldest
its tokens may come from, so its staleness is never understated. Samples that
``--rollout.vllm_generate_batch_size`` keeps for a later step keep their stamp: they are
stale in sync training too.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

#: The key of a sample's stamp in ``experience.info``, taken out by the advantage step.
VERSION_KEY = "advbudget/policy_version"

#: The trainer's attribute: the version of its weights (updates so far).
_WEIGHTS_ATTR = "_advbudget_weights_version"

_local = {"version": 0}  # without Ray: the one process's published version

# This process's handle of the job's counter, kept: Ray ends an actor (not detached) when
# the last handle to it goes out of scope, and each call would then meet a new one. Keyed
# by the Ray node too: a process that starts Ray again (tests) meets a new cluster.
_handles: dict[tuple[str, str], Any] = {}


@functools.cache
def _counter_class() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class PolicyVersion:
        """The version of the weights the vLLM engines hold."""

        def __init__(self) -> None:
            self.version = 0

        def set(self, version: int) -> None:
            self.version = version

        def get(self) -> int:
            return self.version

    return PolicyVersion


def _counter() -> Any:
    """The job's counter actor (created by whichever process asks first), or None without
    Ray."""
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    name = f"advbudget-policy-version-{context.get_job_id()}"
    key = (name, context.get_node_id())
    if key not in _handles:
        _handles[key] = _counter_class().options(name=name, get_if_exists=True).remote()
    return _handles[key]


def publish(version: int) -> None:
    """The engines now hold the weights of ``version`` updates."""
    counter = _counter()
    if counter is None:
        _local["version"] = version
    else:
        import ray

        ray.get(counter.set.remote(version))


def published() -> int:
    """The version of the weights the engines hold (0 before any update is sent)."""
    counter = _counter()
    if counter is None:
        return _local["version"]
    import ray

    return int(ray.get(counter.get.remote()))


def set_weights_version(trainer: Any, version: int) -> None:
    """The trainer's weights have had ``version`` updates (a resume, or one more step)."""
    setattr(trainer, _WEIGHTS_ATTR, int(version))


def publish_weights(trainer: Any) -> None:
    """The trainer sent its weights to the engines: publish their version."""
    publish(getattr(trainer, _WEIGHTS_ATTR, 0))


def stamp(experiences: Sequence[Any], version: int) -> None:
    """Stamp ``version`` on each generated sample (one-row experiences)."""
    import torch

    for experience in experiences:
        rows = len(experience.rewards) if experience.rewards is not None else 1
        experience.info[VERSION_KEY] = torch.full((rows,), version, dtype=torch.int64)


def take_versions(experiences: Sequence[Any]) -> list[int] | None:
    """Each row's stamp, in the experiences' row order, taken out of ``info`` (it is not a
    metric); None when no experience carries one. Rows of some experiences stamped and of
    others not: a ValueError (a sample generated outside the patched generator)."""
    stamped = [VERSION_KEY in experience.info for experience in experiences]
    if not any(stamped):
        return None
    if not all(stamped):
        raise ValueError(
            f"experiences: {stamped.count(False)} of {len(stamped)} carry no policy version "
            "(generated outside advbudget's patched samples generator)"
        )
    versions: list[int] = []
    for experience in experiences:
        versions.extend(int(v) for v in experience.info.pop(VERSION_KEY).reshape(-1).tolist())
    return versions
