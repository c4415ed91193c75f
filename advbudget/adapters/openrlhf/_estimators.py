"""OpenRLHF's ``compute_advantages_and_returns`` with group advantages from the core.

A drop-in for ``RemoteExperienceMaker.compute_advantages_and_returns(self, experiences)``
(openrlhf 0.11.2, ``openrlhf/trainer/ppo_utils/experience_maker.py`` lines 238-341) for the
estimators of the advbudget catalogue (:func:`estimator_names`). OpenRLHF's steps, in its
order:

1. rewards promoted to at least float32; length penalties (DAPO overlong, ProRL
   stop-properly) by OpenRLHF's own ``apply_length_penalties``, which also sets
   ``info["reward"]`` to the rewards it leaves;
2. regrouping by ``experience.index`` into ``[num_prompts, n_samples_per_prompt]`` (each
   prompt's samples contiguous), ``info["group_reward_std"]`` (unbiased, as OpenRLHF);
3. CHANGED: the group shaping is :func:`advbudget.compute_advantages` (OpenRLHF's is an
   ``if/elif`` on the estimator name);
4. OpenRLHF's ``compute_reward`` (clip to ``--reward.clip_range``, the scalar on the last
   action token, minus ``kl_coef * kl``), called once on all experiences stacked (right-padded
   to the widest action mask) instead of once per experience;
5. CHANGED: returns by :func:`cumulative_returns` (one reversed cumsum at gamma 1)
   instead of the loop over the response length; advantages = returns; gamma forced to 1
   (with OpenRLHF's warning) but for reinforce, as OpenRLHF;
6. ``info["return"]``, ``experience.kl = None``; the mirrors of OpenRLHF's whitened
   estimators (reinforce, reinforce_baseline) shape the reward as OpenRLHF (the reward
   itself, ``r - mean``: the conventions' ``returns``) and whiten the per-token returns
   over every action token of the step, as OpenRLHF (:func:`advbudget.core.whiten_tokens`,
   in float64); no batch whitening for the others (OpenRLHF whitens only
   gae/reinforce/reinforce_baseline).

One sample per prompt (``--rollout.n_samples_per_prompt 1``) is refused (ValueError) for
every estimator but ``advbudget_reinforce``, OpenRLHF's ``reinforce`` being the only one of
its own that ``train_ppo_ray`` runs with one sample (:func:`needs_groups`).

ADDED, from the step's one result and the run's options (read once, :mod:`._options`):
each sample's policy version (:mod:`._policy_versions`) with ``--advbudget.max_staleness``
and ``--advbudget.stale_rollouts`` (the core's staleness rules; the staleness metrics on
every step);
``info["advbudget/..."]``, the advantage metrics as per-sample lists whose sample means
OpenRLHF logs (:func:`~advbudget.adapters._features.per_sample_metrics`; the solved/unsolved
split at ``--advbudget.solved_reward``, default 1.0, ``none`` turns it off); and, when
``--advbudget.kappa_every`` is set, each group's o+ / o- kept on the maker for the κ_eff
pass after the update (:mod:`._kappa`); with ``--advbudget.skipped_groups drop``, the
skipped rows' action mask zeroed (:func:`_drop_skipped_rows`); the run's prompt ledger
updated and logged (:func:`_ledger_metrics`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import logging
from typing import Any

from advbudget.core import compute_advantages, get_spec, make_groups, whiten_tokens
from advbudget.metrics import KappaPairs as CorePairs
from advbudget.metrics import PromptLedger

from .._features import (
    RunMemory,
    Step,
    dropped_rows,
    group_prompts,
    kappa_rows,
    per_sample_metrics,
    update_ledger,
)
from .._options import CORE_OPTIONS, AdapterOptions
from ._convention import OPENRLHF
from ._hooks import actor_log_probs, data_parallel_ranks, ray_ships_views_compactly
from ._options import key_of, options_of, read_options
from ._policy_versions import published, take_versions
from ._returns import cumulative_returns

_logger = logging.getLogger("advbudget.adapters.openrlhf")
METRIC_PREFIX = OPENRLHF.metric_prefix


def estimator_names() -> list[str]:
    """Our names for ``--algo.advantage.estimator``: ``reward_budget`` and
    ``advbudget_NAME`` for every name and alias of the catalogue (plugins included)."""
    return list(OPENRLHF.names())


def is_ours(name: str) -> bool:
    """Whether OpenRLHF estimator ``name`` is one of ours (else OpenRLHF's own code runs)."""
    return name in OPENRLHF.names()


def core_estimator(name: str, args: Any = None) -> tuple[str, dict[str, Any]]:
    """The core estimator and its :func:`compute_advantages` keywords for our OpenRLHF
    estimator ``name``: OpenRLHF's conventions for the estimators it has (eps 1e-9 and
    unbiased std for group_norm, exact ties), the core's for the others, then the
    ``--advbudget.<option>`` flags given (``--advbudget.budget 0.5``)."""
    return estimator_settings(name, read_options(args), args)


def estimator_settings(name: str, options: AdapterOptions, args: Any) -> tuple[str, dict[str, Any]]:
    """:func:`core_estimator` from the run's ``options`` already read (``args``: OpenRLHF's
    own, for ``--algo.advantage.no_std_norm``)."""
    core = OPENRLHF.core_name(name)
    OPENRLHF.check_rewards(core, name)
    spec = get_spec(core)
    overrides = options.compute_keywords(spec)
    advantage = getattr(getattr(args, "algo", None), "advantage", None)
    if spec.option("std_norm") is not None and getattr(advantage, "no_std_norm", False):
        overrides.setdefault("std_norm", False)  # OpenRLHF's --algo.advantage.no_std_norm
    return core, OPENRLHF.settings(core, overrides)


def needs_groups(name: str) -> bool:
    """Whether our OpenRLHF estimator ``name`` needs ``--rollout.n_samples_per_prompt > 1``:
    every one, except a mirror of an OpenRLHF estimator that runs with one sample per
    prompt (``reinforce``); ``train_ppo_ray`` refuses one sample for the others it has."""
    core = OPENRLHF.core_name(name)
    return not OPENRLHF.is_mirror(core) or core in OPENRLHF.singletons_refused


def compute_advantages_and_returns(
    maker: Any,
    experiences: list[Any],
    estimator: str | None = None,
    *,
    copy_blocks: bool | None = None,
) -> list[Any]:
    """OpenRLHF's step, for our estimators (``estimator`` defaults to the configured one).

    ``maker`` is the ``RemoteExperienceMaker`` (``maker.strategy.args``, ``maker.kl_ctl``).
    The tensors written to the experiences are views of batch tensors only when Ray ships a
    view's own elements (its zero-copy tensor serialisation, on in OpenRLHF's runtime env);
    otherwise each owns its storage. ``copy_blocks`` True or False decides that instead
    (the benchmark times both).
    """
    import torch
    from openrlhf.models.utils import compute_reward
    from openrlhf.trainer.ppo_utils.length_penalty import (
        apply_length_penalties,
    )

    args = maker.strategy.args
    name = estimator or args.algo.advantage.estimator
    run = options_of(maker, args)  # a bad value fails before any work
    core, options = estimator_settings(name, run, args)
    n = int(args.rollout.n_samples_per_prompt)
    if n < 1 or (n < 2 and needs_groups(name)):
        raise ValueError(f"{name} requires --rollout.n_samples_per_prompt > 1, got {n}")
    if not experiences:
        raise ValueError("experiences: expected at least one Experience, got an empty list")

    for experience in experiences:
        dtype = torch.promote_types(experience.rewards.dtype, torch.float32)
        if experience.rewards.dtype != dtype:
            experience.rewards = experience.rewards.to(dtype)
    # OpenRLHF's own step, always: besides the penalties it re-syncs info["reward"] to
    # the (promoted, penalised) rewards.
    apply_length_penalties(experiences, args)

    sizes = [len(experience.index) for experience in experiences]
    rewards = torch.cat([experience.rewards for experience in experiences])
    if rewards.numel() % n:
        raise ValueError(
            f"experiences: {rewards.numel()} samples are not a whole number of groups of "
            f"n_samples_per_prompt={n}"
        )
    # experience.index: each sample's slot in the prompt-major order, i.e. the core's
    # Permuted layout (each prompt's samples one row, in OpenRLHF's order).
    slots = list(itertools.chain.from_iterable(e.index for e in experiences))
    groups = make_groups(rewards, group_size=n, positions=slots)
    inputs = _inputs(name, core, experiences, rewards)
    texts = _prompt_texts(experiences, rewards.numel())
    rho, forgetting = _forgetting(maker, experiences, texts) if run.kl_rho else (None, {})
    memory = run_memory(maker).keywords(
        get_spec(core),
        texts,
        "OpenRLHF's experiences carry no prompt text (experience.prompts)",
        rho=rho,
    )
    staleness = _staleness(run, experiences)
    result = compute_advantages(
        rewards, core, groups=groups, **options, **inputs, **memory, **staleness
    )
    # the step's one result: every feature reads it
    step = Step(result, run, METRIC_PREFIX, outcome=_outcomes(experiences))

    # OpenRLHF whitens the per-token returns of its reinforce and reinforce_baseline over
    # every action token of the step, after the KL term: their mirrors do too, and their
    # returns (and info["return"]) are of the reward before the whitening (the
    # conventions' ``returns``). Every other estimator shapes the sequence reward.
    source = OPENRLHF.returns_of(core)
    per_token = source != "advantages"
    gamma = float(args.algo.advantage.gamma)
    if gamma != 1.0 and not (per_token and core == "reinforce"):  # as OpenRLHF
        _logger.warning("gamma is set to 1.0 for %s", name)
        args.algo.advantage.gamma = gamma = 1.0

    # One compute_reward and one reversed cumsum over every experience at once (per
    # experience, the Python work dominates): rows right-padded to the widest action mask.
    widths = [int(experience.action_mask.shape[1]) for experience in experiences]
    layout = _Layout(sizes, widths)
    mask = layout.stack([e.action_mask for e in experiences])
    kl = layout.stack([e.kl for e in experiences])

    def with_kl(sequence_reward: Any) -> Any:  # OpenRLHF's per-token reward
        return compute_reward(
            sequence_reward,
            maker.kl_ctl.value,
            kl,
            action_mask=mask,
            reward_clip_range=args.reward.clip_range,
        )

    if per_token:
        reward = with_kl(_returns_reward(source, rewards, groups, options))
        returns = cumulative_returns(reward, mask, gamma)
        advantages = _whitened(returns, mask, result)
    else:
        reward = with_kl(result.advantages.to(rewards.dtype))  # experience order
        advantages = returns = cumulative_returns(reward, mask)

    # OpenRLHF's own per-sample info, as tensors.
    info = {"return": reward.sum(-1)}
    if n > 1:  # as OpenRLHF: no group std of one sample
        std = groups.rows(rewards).std(-1, keepdim=True)
        info["group_reward_std"] = groups.flat(std.expand(-1, n))
    metrics = per_sample_metrics(step)
    metrics.update(_ledger_metrics(maker, texts, step))
    metrics.update({key: [value] * rewards.numel() for key, value in forgetting.items()})
    starts = list(itertools.accumulate([0, *sizes[:-1]]))  # each experience's first sample

    # Each experience gets views of batch tensors when Ray ships a view's own elements,
    # else copies: a view pickled by default carries its whole storage through Ray.
    copy = not ray_ships_views_compactly() if copy_blocks is None else copy_blocks
    returns_flat = layout.flatten(returns)  # masked_select: a new tensor
    advantages_flat = returns_flat.clone() if returns is advantages else layout.flatten(advantages)
    parts = zip(
        experiences,
        starts,
        layout.blocks(returns_flat),
        layout.blocks(advantages_flat),
        *(values.split(sizes) for values in info.values()),
        strict=True,
    )
    for experience, start, returns_block, advantages_block, *info_values in parts:
        if copy:
            returns_block, advantages_block = returns_block.clone(), advantages_block.clone()
            info_values = [values.clone() for values in info_values]
        experience.returns = returns_block
        experience.advantages = advantages_block
        experience.info.update(zip(info, info_values, strict=True))
        end = start + len(experience.index)
        experience.info.update((key, values[start:end]) for key, values in metrics.items())
        experience.kl = None
    if run.skipped_groups == "drop":
        _drop_skipped_rows(maker, experiences, dropped_rows(step), layout, mask)
    _remember_for_kappa(maker, experiences, step)
    return experiences


def _outcomes(experiences: list[Any]) -> Any:
    """Each sample's ``scores`` (the reward function's outcome, which dynamic filtering
    reads) where every experience has them: the rewards may be shaped beside them (the
    length penalties, a reward function's own terms). None otherwise."""
    import torch

    if any(experience.scores is None for experience in experiences):
        return None
    return torch.cat([experience.scores.reshape(-1) for experience in experiences])


def _staleness(run: AdapterOptions, experiences: list[Any]) -> dict[str, Any]:
    """The step's policy versions (each sample's stamp, :mod:`._policy_versions`) and the
    run's rule, for the core; none where the samples carry no stamp (a generator without
    the patch), which ``--advbudget.max_staleness`` refuses."""
    versions = take_versions(experiences)
    if versions is None:
        if run.max_staleness is not None:
            raise ValueError(
                f"{key_of('max_staleness')}: the samples carry no policy version (they were "
                "generated without advbudget's patch of OpenRLHF's samples generator)"
            )
        return {}
    return run.staleness_keywords(versions, published())


def _drop_skipped_rows(
    maker: Any, experiences: list[Any], rows: list[int], layout: _Layout, mask: Any
) -> None:
    """``--advbudget.skipped_groups drop``: zero the action mask of every skipped row.

    OpenRLHF 0.11.2 reads the mask for every term of the actor's loss and for both of its
    normalisers (``openrlhf/models/loss.py`` ``aggregate_loss``: masked token sum over the
    step's mask sum, or per-sequence means over the step's count of sequences with a
    non-empty mask, ``openrlhf/utils/loss_utils.py`` ``_optimizer_step_loss_norm``): so the
    policy loss, the KL loss and the entropy term leave these rows out, numerator and
    normaliser alike, as if the batch held only the kept groups. The rows stay in the batch
    (every DP rank keeps its micro-batch count: DeepSpeed's steps stay in lockstep); a
    micro-batch or a whole step with no kept token is guarded by the patch
    (``_hooks._wrap_aggregate_loss``)."""
    if not getattr(maker, "_advbudget_drop_logged", False):
        maker._advbudget_drop_logged = True
        _logger.info(
            "advbudget: %s drop: rows of skipped groups (and NaN rewards) get an all-zero "
            "action_mask: out of the policy, KL and entropy losses and their normalisers "
            "(token-mean: kept tokens; seq-mean-token-mean and gspo: kept sequences); "
            "OpenRLHF has no constant normaliser",
            key_of("skipped_groups"),
        )
    if not rows:
        return
    # One product over the stacked masks (``mask``), then each experience with a dropped
    # row gets its rows of it, as a tensor of its own (a slice would carry the batch).
    zeroed = mask.clone()
    zeroed[rows] = 0
    ends = list(itertools.accumulate(layout.sizes))
    for j in sorted({bisect.bisect_right(ends, row) for row in rows}):
        end, size = ends[j], layout.sizes[j]
        experiences[j].action_mask = zeroed[end - size : end, : layout.widths[j]].clone()


def _whitened(returns: Any, mask: Any, result: Any) -> Any:
    """OpenRLHF's whitening of reinforce's per-token returns over every action token of
    the step (its biased variance floored at 1e-8: the estimator's options, as the core
    resolved them from the row), in float64, in the returns' dtype; rows the core leaves
    out (NaN rewards, ``nan_policy="omit"``) out of the statistics and 0."""
    import torch

    inside = mask.bool() & result.valid[:, None]
    whitened = whiten_tokens(returns.to(torch.float64), inside, **result.options)
    return whitened.to(returns.dtype)


def _returns_reward(source: str, rewards: Any, groups: Any, options: dict[str, Any]) -> Any:
    """The sequence reward OpenRLHF's returns are made of, where they are not the
    advantages: the reward itself, or another estimator's advantages (``r - mean`` for
    reinforce_baseline), NaN rewards (``nan_policy="omit"``) as 0."""
    import torch

    if source == "reward":
        return torch.nan_to_num(rewards, nan=0.0)
    keep: dict[str, Any] = {k: options[k] for k in CORE_OPTIONS if k in options}
    result = compute_advantages(rewards, source, groups=groups, **OPENRLHF.settings(source, keep))
    return result.advantages.to(rewards.dtype)


def _inputs(name: str, core: str, experiences: list[Any], rewards: Any) -> dict[str, Any]:
    """The estimator's extra inputs, in experience order like the rewards:
    ``response_lengths`` is each sample's action-token count; OpenRLHF has no other
    per-sample input to offer."""
    import torch

    out = {}
    for declared in get_spec(core).inputs:
        if declared.name != "response_lengths":
            if declared.required:
                raise ValueError(
                    f"{name}: needs {declared.name} ({declared.doc}), which OpenRLHF's "
                    "experiences do not carry"
                )
            continue
        lengths = torch.cat([e.action_mask.sum(-1) for e in experiences])
        out[declared.name] = lengths.to(rewards.dtype)
    return out


MEMORY_ATTR = "_advbudget_memory"


def run_memory(maker: Any) -> RunMemory:
    """The run's prompt ledger and estimator memory, kept on the experience maker (in the
    trainer actor under Ray; saved with OpenRLHF's checkpoint and restored on resume by
    the patch)."""
    memory = getattr(maker, MEMORY_ATTR, None)
    if memory is None:
        memory = RunMemory()
        setattr(maker, MEMORY_ATTR, memory)
    return memory


def _prompt_texts(experiences: list[Any], num: int) -> list[str] | None:
    """Each sample's prompt text (``experience.prompts``, the text sent to vLLM: the same
    every epoch), in experience order: the identity the ledger and an estimator's memory
    key on. None when the experiences do not carry one per sample."""
    texts = list(itertools.chain.from_iterable(e.prompts or [] for e in experiences))
    return texts if len(texts) == num else None


@dataclasses.dataclass(frozen=True)
class _Response:
    """One sample's rows as spo's ``rho="kl"`` keeps them (host tensors): what the actor's
    ``forward`` takes."""

    sequences: Any
    action_mask: Any
    attention_mask: Any


def _forgetting(
    maker: Any, experiences: list[Any], texts: list[str] | None
) -> tuple[Any, dict[str, float]]:
    """``rho="kl"``: spo's ρ of each sample (experience order) and its metrics
    (:class:`~advbudget.adapters._features.LastResponses`): the log-probs now are the
    experiences' ``action_log_probs``, a kept response is scored again by the actor group's
    ``forward``, as the experience maker scores them."""
    if texts is None:
        return None, {}  # the memory's keywords say what is missing
    starts = list(itertools.accumulate([0] + [len(e.index) for e in experiences[:-1]]))

    def now(rows: list[int]) -> tuple[list[Any], list[Any]]:
        handles, logps = [], []
        for row in rows:
            j = bisect.bisect_right(starts, row) - 1
            experience, i = experiences[j], row - starts[j]
            handle = _Response(
                experience.sequences[i].cpu(),
                experience.action_mask[i].cpu(),
                experience.attention_mask[i].cpu(),
            )
            handles.append(handle)
            values = experience.action_log_probs[i].cpu()[handle.action_mask.bool()]
            logps.append(values.float().numpy())
        return handles, logps

    return run_memory(maker).last_responses.rho(
        texts, now, lambda handles: _rescore(maker, handles), prefix=METRIC_PREFIX
    )


def _rescore(maker: Any, handles: list[_Response]) -> list[Any]:
    """The actor's token log-probs of kept responses now: one row a chunk, repeated up to a
    multiple of the group's data-parallel ranks (every rank runs as many forwards)."""
    if not handles:
        return []
    group = maker.actor_model_group
    rows = [*handles, *[handles[0]] * (-len(handles) % data_parallel_ranks(group))]
    logps = actor_log_probs(
        maker,
        group,
        sequences=[h.sequences[None] for h in rows],
        action_mask=[h.action_mask[None] for h in rows],
        attention_mask=[h.attention_mask[None] for h in rows],
    )
    return [
        values[0].cpu()[h.action_mask.bool()].float().numpy()
        for values, h in zip(logps, handles, strict=False)
    ]


def _ledger_metrics(maker: Any, texts: list[str] | None, step: Step) -> dict[str, list[float]]:
    """Record the batch in the run's prompt ledger, keyed by each group's prompt text;
    return its metrics as per-sample lists (every sample the run's value). Nothing when
    the solved/unsolved split is off or the experiences carry no prompt text."""
    if not step.options.prompt_ledger or texts is None:
        return {}
    memory = run_memory(maker)
    if memory.ledger is None:
        memory.ledger = PromptLedger()
    metrics = update_ledger(memory.ledger, step, group_prompts(step, texts))
    num = len(texts)
    return {name: [value] * num for name, value in metrics.items()}


class _Layout:
    """Experiences of ``[B_i, W_i]`` tensors as one ``[sum B_i, max W_i]`` batch (rows
    right-padded with zeros) and back, with a few whole-batch operations instead of a few
    per experience: ``keep`` marks the real columns of each row, and the kept elements in
    row-major order are the experiences' blocks one after the other."""

    def __init__(self, sizes: list[int], widths: list[int]) -> None:
        import torch

        self.sizes = sizes
        self.widths = widths
        self.block_sizes = [size * width for size, width in zip(sizes, widths, strict=True)]
        row_widths = torch.tensor(widths).repeat_interleave(torch.tensor(sizes))
        self.keep = torch.arange(max(widths)) < row_widths[:, None]

    def stack(self, tensors: list[Any]) -> Any:
        """The batch ``[sum B_i, max W_i]`` of the experiences' ``[B_i, W_i]`` tensors."""
        import torch

        out = tensors[0].new_zeros(self.keep.shape)
        # masked_scatter_/masked_select: several times faster than boolean indexing
        return out.masked_scatter_(self.keep, torch.cat([t.reshape(-1) for t in tensors]))

    def flatten(self, batch: Any) -> Any:
        """The real elements of a batch: every experience's block, row-major, in order."""
        import torch

        return torch.masked_select(batch, self.keep)

    def blocks(self, flat: Any) -> list[Any]:
        """Views ``[B_i, W_i]`` of a :meth:`flatten` result, one per experience."""
        return [
            block.view(size, width)
            for block, size, width in zip(
                flat.split(self.block_sizes), self.sizes, self.widths, strict=True
            )
        ]


def _remember_for_kappa(maker: Any, experiences: list[Any], step: Step) -> None:
    """Keep each group's o+ and o- (:func:`~advbudget.adapters._features.kappa_rows`,
    positions in the concatenated experiences) for the κ_eff pass after the update;
    nothing is kept when κ_eff is off."""
    if not step.options.kappa_every:
        return
    stale = getattr(maker, "_advbudget_kappa_pairs", None) is not None
    if stale and not getattr(maker, "_advbudget_kappa_warned", False):
        # The κ_eff hook after ppo_train releases them every step: it did not run (once).
        maker._advbudget_kappa_warned = True
        _logger.warning(
            "advbudget: κ_eff is not running: the previous step's pairs were never used (the "
            "trainer's ppo_train is not advbudget's; see advbudget.adapters.openrlhf._hooks)"
        )
    maker._advbudget_kappa_pairs = KappaPairs(experiences=experiences, pairs=kappa_rows(step))


@dataclasses.dataclass
class KappaPairs:
    """One step's κ_eff pairs and the experiences they index: ``pairs`` (the core's
    :class:`~advbudget.metrics.KappaPairs`) holds positions in the concatenated experiences
    (experience order), one pair per kept group with an advantage gap."""

    experiences: list[Any]
    pairs: CorePairs

    @property
    def top(self) -> Any:
        return self.pairs.top

    @property
    def bottom(self) -> Any:
        return self.pairs.bottom
