"""``--advbudget.skipped_groups resample``: OpenRLHF's dynamic filtering, deciding with the
estimator's own skip rule and bounded by ``--advbudget.max_generation_batches``.

OpenRLHF 0.11.2's filter (its samples generator's vLLM generation,
``openrlhf/trainer/ppo_utils/samples_generator.py`` lines 140-193, wrapped in
:mod:`._hooks`) keeps a prompt when the mean of its samples' ``scores`` lies strictly inside
``--algo.dynamic_filtering_range`` and sends one new prompt for each prompt it drops, with
no bound but the end of the dataloader. A mean-in-range rule is not the estimator's rule:
graded rewards tie at any mean, and ties within ``tie_rtol``/``tie_atol`` are skipped by
the core. So, for our estimators with ``resample``, :func:`generate` replaces that method:
the same flow (dispatch the prompts, take each prompt's samples as they arrive, send a new
prompt for each dropped one) with two changes:

- the decision is :func:`group_kept`: the core's ``group_skipped`` on the group's
  ``rewards`` (the estimator's input, not ``scores``), with the estimator's options (tie
  tolerance, ``nan_policy``), at the dtype the advantage step uses. A group without
  rewards at generation time is kept (as OpenRLHF does). The length penalties
  (``--reward.overlong_buffer_len``, ``--reward.stop_properly_penalty_coef``) apply later,
  in the advantage step, so the filter sees the rewards before them;
- new prompts stop once ``max_generation_batches`` times the step's prompts have been sent
  (a "generation batch": the step's prompts; OpenRLHF replaces prompt by prompt, so the
  rounds are ``prompts sent / step's prompts``, a fraction); the step then trains on the
  groups it kept, with a warning naming the counts. The rounds go to the trainer's status
  as ``advbudget/generation_batches`` (sync trainer; the async trainer generates in
  another actor, where only the warning shows).
"""

from __future__ import annotations

import logging
from typing import Any

from advbudget.core import compute_advantages, make_groups

from .._features import may_resample
from .._options import AdapterOptions
from ._estimators import _inputs, estimator_settings
from ._hooks import collect_prompts, dispatch_prompts, response_experience
from ._options import key_of, options_of, read_options

_logger = logging.getLogger("advbudget.adapters.openrlhf")
ROUNDS_METRIC = "advbudget/generation_batches"
_ROUNDS_ATTR = "_advbudget_generation_batches"


def group_kept(experiences: list[Any], args: Any, options: AdapterOptions | None = None) -> bool:
    """Whether the estimator keeps one prompt's group: ``experiences`` are its samples
    (OpenRLHF's one-row ``Experience`` objects from the rollout), ``options`` the run's
    (read from ``args`` when not given). A group with a sample without reward is kept
    (nothing to decide on)."""
    import torch

    if not experiences or any(e.rewards is None for e in experiences):
        return True
    rewards = torch.cat([e.rewards.reshape(-1) for e in experiences])
    rewards = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    name = args.algo.advantage.estimator
    run = read_options(args) if options is None else options
    core, settings = estimator_settings(name, run, args)
    groups = make_groups(rewards, group_size=len(rewards))
    inputs = _inputs(name, core, experiences, rewards)
    result = compute_advantages(rewards, core, groups=groups, **settings, **inputs)
    return not bool(result.group_skipped[0])


def generate(
    generator: Any, dataloader_iter: Any, num_prompts: int, **generate_kwargs: Any
) -> tuple[list[Any], int, bool]:
    """OpenRLHF's vLLM generation with dynamic filtering, our decision and bound: returns
    (kept samples, prompts sent, dataloader exhausted) as OpenRLHF's does."""
    import ray

    args = generator.args
    options = options_of(generator, args)
    prompts, labels, images, exhausted = collect_prompts(dataloader_iter, num_prompts)
    setattr(generator, _ROUNDS_ATTR, None)
    if not prompts:
        return [], 0, True
    target = len(prompts)
    sent = target
    pending = dispatch_prompts(generator, prompts, labels, images, **generate_kwargs)
    kept: list[Any] = []
    kept_groups = 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=10.0)
        for ref in ready:
            group = [
                response_experience(generator, response, **generate_kwargs)
                for response in ray.get(ref)
            ]
            if group_kept(group, args, options):
                kept.extend(group)
                kept_groups += 1
            # A dropped prompt is replaced at once (OpenRLHF's streaming refill): the groups
            # still missing are those neither kept nor in flight; whole rounds sent are under
            # the cap exactly when the prompts sent are under cap * the step's prompts.
            elif not exhausted and may_resample(
                options, sent // target, target - kept_groups - len(pending)
            ):
                more, more_labels, more_images, exhausted = collect_prompts(dataloader_iter, 1)
                sent += len(more)
                if more:
                    pending.extend(
                        dispatch_prompts(
                            generator, more, more_labels, more_images, **generate_kwargs
                        )
                    )
    rounds = sent / target
    setattr(generator, _ROUNDS_ATTR, rounds)
    if kept_groups < target:
        limit = options.max_generation_batches
        why = (
            "the dataloader ran out"
            if exhausted
            else f"{key_of('max_generation_batches')} {limit} reached"
        )
        _logger.warning(
            "advbudget: resample: %d of %d groups kept after %d prompts (%.2f generation "
            "batches; %s): training on %d groups",
            kept_groups,
            target,
            sent,
            rounds,
            why,
            kept_groups,
        )
    return kept, sent, exhausted


def rounds_status(trainer: Any) -> dict[str, float]:
    """``{advbudget/generation_batches: rounds}`` of the trainer's last generation (empty
    when its generator did not resample, or lives in another actor)."""
    rounds = getattr(getattr(trainer, "samples_generator", None), _ROUNDS_ATTR, None)
    return {} if rounds is None else {ROUNDS_METRIC: float(rounds)}
