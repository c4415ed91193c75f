"""``+algorithm.advbudget.skipped_groups=resample``: DAPO's dynamic sampling in verl's V1
sync trainer, with the estimator's skip rule and a cap on the generation rounds.

verl 0.9.1 filters groups in its V1 ``ReplayBuffer`` (``algorithm.filter_groups``): a
finished group whose rewards are exactly equal (``np.std == 0``, a group of one kept) is
evicted and its prompt replaced, until the step holds ``data.train_batch_size`` groups
(``verl/trainer/ppo/v1/replay_buffer.py:261-313, 422-505``). It ignores
``max_num_gen_batches`` (``trainer_base.py:205-211``). :class:`SkipRuleReplayBuffer` is that
buffer, plugged in as verl's custom sampler (``trainer.v1.sampler.custom_sampler``), with
two changes: a group is evicted exactly when the estimator would skip it (the core's rule:
ties within ``tie_rtol``/``tie_atol``, groups of one, NaN rewards under
``nan_policy=omit``), and once the step's prompts reach ``max_generation_batches`` train
batches nothing more is evicted: the step trains on what it has (kept groups first; its
skipped groups keep advantage 0), with a warning naming the counts.
``advbudget/generation_batches`` logs the rounds each step took (prompts generated /
``data.train_batch_size``, rounded up), ``advbudget/refilled_prompts`` the prompts
refilled. A refill asks for exactly the evicted count: the trainer sets
``data.gen_batch_size=1`` so that verl's dataloader can serve any count.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any

from ._estimators import compute_result
from ._hooks import ReplayBufferHooks, replay_buffer
from ._options import option
from ._sessions import split_sessions

#: What verl loads as the custom sampler (``load_extern_type(path, name)``).
SAMPLER_PATH = "pkg://advbudget.adapters.verl._resample"
SAMPLER_NAME = "SkipRuleReplayBuffer"


def sampler_settings(config: Any, estimator: str, max_generation_batches: int) -> dict[str, Any]:
    """What :class:`SkipRuleReplayBuffer` reads from ``sampler_kwargs.advbudget``."""
    from omegaconf import OmegaConf

    algorithm = config.algorithm
    plain = (
        OmegaConf.to_container(algorithm, resolve=True)
        if OmegaConf.is_config(algorithm)
        else algorithm
    )
    filter_groups = option(algorithm, "filter_groups", None)
    return {
        "estimator": estimator,
        "algorithm": {
            "advbudget": dict(option(plain, "advbudget", {}) or {}),
            **_verl_switches(plain),
        },
        "train_batch_size": int(config.data.train_batch_size),
        "max_generation_batches": max_generation_batches,
        "max_inflight_gen_batches": int(option(filter_groups, "max_inflight_gen_batches", 1)),
    }


def _verl_switches(algorithm: Any) -> dict[str, Any]:
    """The verl options the skip rule reads besides ``advbudget.*``."""
    value = option(algorithm, "norm_adv_by_std_in_grpo", None)
    return {} if value is None else {"norm_adv_by_std_in_grpo": bool(value)}


def skipped_uids(
    rewards: list[float],
    uids: list[str],
    estimator: str,
    algorithm: Any,
    keys: list[str] | None = None,
) -> set[str]:
    """The groups (uids) the estimator skips, from one sequence reward per response
    (``keys``: verl's key of each, so that a multi-output session counts once, as the
    estimator counts it: :mod:`._sessions`).

    Examples:
        >>> sorted(skipped_uids([1.0, 1.0, 0.0, 1.0, 0.5], list("aabbc"), "reward_budget", None))
        ['a', 'c']
    """
    import numpy as np

    scores = np.asarray(rewards, dtype=np.float64)[:, None]
    labels = np.asarray(uids, dtype=object)
    sessions = None if keys is None else split_sessions(keys, uids)
    result = compute_result(estimator, scores, labels, algorithm, sessions=sessions)
    group_skipped = np.asarray(result.group_skipped).tolist()
    index = np.asarray(result.group_index).tolist()
    return {uid for uid, group in zip(uids, index, strict=True) if group_skipped[group]}


_SAMPLER: list[type] = []


def __getattr__(name: str) -> Any:
    """``SkipRuleReplayBuffer``, verl's sync ``ReplayBuffer`` with the estimator's skip rule
    and the rounds cap (see the module docstring), built on first use so that importing
    this module does not import verl's trainer and TransferQueue. verl loads it from
    ``trainer.v1.sampler.custom_sampler``; its settings come in ``sampler_kwargs.advbudget``
    (:func:`sampler_settings`)."""
    if name != SAMPLER_NAME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _SAMPLER:
        _SAMPLER.append(_make_sampler(replay_buffer()))
    return _SAMPLER[0]


def _make_sampler(base: type) -> type:
    import transfer_queue as tq

    class Sampler(ReplayBufferHooks, base):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            settings = dict(option(kwargs.get("sampler_kwargs"), "advbudget", {}) or {})
            self._advbudget = settings
            kwargs.update(
                filter_groups_metric="reward",  # turns verl's DAPO gating on
                train_batch_size=int(settings["train_batch_size"]),
                gen_batch_size=1,  # as verl's own filter (trainer_base.py:178-182)
                max_inflight_gen_batches=int(settings.get("max_inflight_gen_batches", 1)),
            )
            super().__init__(**kwargs)
            self._generated = 0  # prompts refilled this step
            self._capped = False
            refill: Any = getattr(self, "refill_fn")  # noqa: B009 (set by verl)

            def counted(count: int) -> Any:
                self._generated += count
                return refill(count)

            self.refill_fn = counted

        def generation_batches(self) -> int:
            """Rounds this step took: its own batch and the refills, in train batches."""
            return 1 + math.ceil(self._generated / int(self.train_batch_size))

        def filtered_groups(self, partition_id: str) -> tuple[set[str], Counter[float]]:
            """verl's DAPO filter with the estimator's skip rule: the groups (uids) to
            evict and a count of their rewards; nothing after the rounds cap."""
            if partition_id == "val":
                return set(), Counter()
            finished = self.finished_keys[partition_id]
            cache = self.classified(partition_id)
            for uid in cache.keys() - finished:
                del cache[uid]
            new = finished - cache.keys()
            keys = [k for k in self.partitions[partition_id] if k.split("_")[0] in new]
            if keys:
                data = tq.kv_batch_get(
                    keys=keys, partition_id=partition_id, select_fields=["rm_scores"]
                )
                rewards = [float(score.sum()) for score in data["rm_scores"]]
                uids = [key.split("_")[0] for key in keys]
                settings = self._advbudget
                skipped = skipped_uids(
                    rewards, uids, settings["estimator"], settings.get("algorithm"), keys
                )
                first = dict(zip(uids, rewards, strict=True))
                for uid in new:
                    cache[uid] = first[uid] if uid in skipped else None
            filtered = {uid: r for uid, r in cache.items() if r is not None}
            limit = int(self._advbudget["max_generation_batches"])
            if self._generated >= (limit - 1) * self.train_batch_size:
                self._capped = True  # the step trains on what it has
                return set(), Counter()
            return set(filtered), Counter(filtered.values())

        def sampleable(
            self, partition_id: str, sampleable_keys: set[str], batch_size: int
        ) -> set[str]:
            """The groups verl may sample: after the cap, skipped groups are sampleable, so
            kept ones are taken first (the rest is verl's discarded surplus)."""
            if self._capped and partition_id != "val":
                cache = self.classified(partition_id)
                kept = {uid for uid in sampleable_keys if cache.get(uid) is None}
                if len(kept) >= batch_size:
                    return kept
            return sampleable_keys

        def sample(self, global_steps: int, partition_id: str, batch_size: int) -> Any:
            if partition_id == "val":
                return super().sample(global_steps, partition_id, batch_size)
            self._generated, self._capped = 0, False
            batch, metrics = super().sample(global_steps, partition_id, batch_size)
            rounds = self.generation_batches()
            metrics["advbudget/generation_batches"] = float(rounds)
            metrics["advbudget/refilled_prompts"] = float(self._generated)
            if self._capped:
                cache = self.classified(partition_id)
                uids = {key.split("_")[0] for key in batch.keys}
                left = sum(cache.get(uid) is not None for uid in uids)
                if left:
                    warnings.warn(
                        f"advbudget: resample: step {global_steps} reached "
                        f"max_generation_batches={self._advbudget['max_generation_batches']} "
                        f"({rounds} rounds): {left} of {len(uids)} groups are still skipped "
                        "and train with advantage 0",
                        RuntimeWarning,
                        stacklevel=2,
                    )
            return batch, metrics

    Sampler.__name__ = Sampler.__qualname__ = SAMPLER_NAME
    Sampler.__module__ = __name__
    return Sampler
