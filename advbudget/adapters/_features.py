"""The trainer features around the estimators, written once for every adapter.

An adapter computes its step's :class:`~advbudget.AdvantageResult` once and hands it, with
the run's :class:`~._options.AdapterOptions`, to these functions: the metrics its framework
logs, the prompt ledger, κ_eff's pairs, ``drop``'s rows and ``resample``'s plan. They import
no trainer and take numpy, torch or jax results alike (through the core); what stays in an
adapter is only how its framework hands over a batch and takes these back.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from advbudget._ledger import PromptLedger
from advbudget.core import (
    AdvantageResult,
    EstimatorSpec,
    EstimatorState,
    spo_rho,
)
from advbudget.core._arrays import to_host
from advbudget.metrics import (
    KappaPairs,
    advantage_metric_dict,
    advantage_metrics,
    group_outcomes,
    kappa_pairs,
)

from ._options import AdapterOptions


@dataclass(frozen=True)
class Step:
    """One step's advantages, as the adapter computed them, and the run's options.
    ``outcome``: each rollout's outcome where the framework keeps one beside a shaped
    reward (OpenRLHF's ``scores``), for ``outcome_disagreement_group_fraction``."""

    result: AdvantageResult
    options: AdapterOptions
    prefix: str = "advbudget/"
    outcome: Any = None


def defined(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics that have a value this step: NaN ones (the advantage gap when every group
    was skipped, κ_eff without pairs) are left out, not logged as NaN (TensorBoard refuses
    them, and a mean over steps would turn NaN).

    Examples:
        >>> defined({"a": 1.0, "b": float("nan")})
        {'a': 1.0}
    """
    return {key: float(value) for key, value in metrics.items() if not math.isnan(value)}


def step_metrics(step: Step) -> dict[str, float]:
    """The step's advantage metrics (:func:`~advbudget.metrics.advantage_metrics`),
    prefixed, NaN left out."""
    metrics = advantage_metric_dict(
        step.result,
        step.prefix,
        solved_reward=step.options.solved_reward,
        outcome_rewards=step.outcome,
    )
    return defined(metrics)


def per_sample_metrics(step: Step) -> dict[str, list[float]]:
    """:func:`step_metrics` as one value per rollout, in the result's row order, for a
    framework that logs the sample mean of per-sample values (OpenRLHF's ``info``).

    The fractions and the mean advantage are per-rollout values whose mean is the batch's;
    the advantage gap (a mean over kept groups), std, min and max are the batch's value
    for every rollout. ``unsolved_group_fraction`` / ``solved_group_fraction`` are
    fractions of the groups with a reward: each rollout of such a group carries 1 or 0 (all
    groups have the same size), each rollout of a group with no reward (all NaN) carries
    the batch's fraction, so the mean is the batch's value. NaN values are left out.
    """
    result, solved_reward = step.result, step.options.solved_reward
    index = to_host(result.group_index).astype(np.int64)
    batch = advantage_metrics(result, solved_reward=solved_reward, outcome_rewards=step.outcome)
    values: dict[str, np.ndarray] = {"skipped_group_fraction": to_host(result.group_skipped)[index]}
    if solved_reward is not None:
        outcomes = group_outcomes(result, solved_reward)
        scored = to_host(outcomes.scored)
        for name, groups in (
            ("unsolved_group_fraction", outcomes.unsolved),
            ("solved_group_fraction", outcomes.solved),
        ):
            if not math.isnan(batch[name]):
                values[name] = np.where(scored, to_host(groups), batch[name])[index]
    advantages = to_host(result.advantages)
    values["positive_advantage_fraction"] = advantages > 0
    values["valid_fraction"] = to_host(result.valid)
    values["advantage_mean"] = advantages
    out = {name: np.asarray(v, dtype=np.float64).tolist() for name, v in values.items()}
    for name in BATCH_WIDE:
        if name in batch and not math.isnan(batch[name]):  # e.g. no gap: every group skipped
            out[name] = [batch[name]] * len(index)
    return {step.prefix + name: v for name, v in out.items()}


#: The metrics :func:`per_sample_metrics` gives every rollout the batch's value of.
BATCH_WIDE = (
    "advantage_gap_mean",
    "advantage_std",
    "advantage_min",
    "advantage_max",
    "nan_reward_fraction",
    "group_weight_mean",  # with a group weight
    "group_weight_min",
    "group_weight_max",
    "group_mean_p10",  # percentiles: not a mean of per-sample values
    "group_mean_p50",
    "group_mean_p90",
    "staleness_mean",  # with policy versions
    "staleness_max",
    "stale_fraction",
    "mixed_version_group_fraction",
    "outcome_disagreement_group_fraction",  # with outcomes beside shaped rewards
)


def group_prompts(step: Step, row_prompts: Sequence[Any]) -> list[Any]:
    """The prompt of each group (the first row's), in group order, from one prompt per row."""
    prompts: dict[int, Any] = {}
    for row, group in enumerate(to_host(step.result.group_index).tolist()):
        prompts.setdefault(int(group), row_prompts[row])
    return [prompts[group] for group in range(step.result.num_groups)]


def update_ledger(ledger: PromptLedger, step: Step, prompts: Sequence[Any]) -> dict[str, float]:
    """Record the step's groups (one prompt identity per group, in group order) in the
    run's ledger; return its metrics, prefixed, NaN left out. Nothing when the solved/
    unsolved split is off (``solved_reward=None``)."""
    solved_reward = step.options.solved_reward
    if solved_reward is None:
        return {}
    ledger.update(prompts, group_outcomes(step.result, solved_reward))
    return defined({step.prefix + key: value for key, value in ledger.metrics().items()})


class RunMemory:
    """What a run keeps across steps and in the trainer's checkpoints: the prompt ledger
    (when on) and, for an estimator with memory (``spo``, ``rae``), its
    :class:`~advbudget.EstimatorState`. It lives where the advantages are computed (the
    driver under Ray); :meth:`state_dict` is JSON, written where the framework's
    checkpoint is, and :meth:`from_state_dict` restores it on resume.

    Examples:
        >>> import json
        >>> memory = RunMemory()
        >>> memory.ledger = PromptLedger()
        >>> again = RunMemory.from_state_dict(json.loads(json.dumps(memory.state_dict())))
        >>> again.ledger is not None, again.estimator_state is None
        (True, True)
    """

    def __init__(self) -> None:
        self.ledger: PromptLedger | None = None
        self.estimator_state: EstimatorState | None = None
        # rho="kl": in memory only (see LastResponses), never in state_dict.
        self.last_responses = LastResponses()

    def __bool__(self) -> bool:
        """Whether there is anything to save."""
        return self.ledger is not None or self.estimator_state is not None

    def keywords(
        self,
        spec: EstimatorSpec,
        row_prompts: Sequence[Any] | None,
        where: str,
        *,
        remember: bool = True,
        rho: np.ndarray | None = None,
    ) -> dict[str, Any]:
        """The :func:`~advbudget.compute_advantages` keywords of an estimator with memory:
        this run's state and one stable prompt identity per row (``row_prompts``, as the
        ledger's); none for the others. ``where`` names, in the error, what the framework
        failed to hand over. ``remember=False`` (an evaluation pass): scored against the
        run's memory, which it leaves as it was. ``rho``: the step's KL-adaptive forgetting
        factor per row (:meth:`LastResponses.rho`), given to ``spo``."""
        if spec.tracker is None:
            return {}
        if row_prompts is None:
            raise _no_prompts(spec, where)
        if self.estimator_state is None:
            self.estimator_state = EstimatorState()
        state = self.estimator_state if remember else self.estimator_state.copy()
        forgetting = {} if rho is None or not remember else {"rho": rho}
        return {"state": state, "prompt_ids": list(row_prompts), **forgetting}

    def state_dict(self) -> dict[str, Any]:
        """The memory as plain JSON types."""
        return {
            "version": _MEMORY_VERSION,
            "prompt_ledger": None if self.ledger is None else self.ledger.state_dict(),
            "estimator_state": (
                None if self.estimator_state is None else self.estimator_state.state_dict()
            ),
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> RunMemory:
        """The memory :meth:`state_dict` saved; a checkpoint written before the estimator
        state existed holds the ledger alone, and reads as that."""
        memory = cls()
        if "codes" in state:  # a bare PromptLedger.state_dict()
            ledger_state, estimator_state = state, None
        elif state.get("version") == _MEMORY_VERSION:
            ledger_state, estimator_state = state["prompt_ledger"], state["estimator_state"]
        else:
            raise ValueError(
                f"state: expected a RunMemory.state_dict() of version {_MEMORY_VERSION}, got "
                f"version {state.get('version')!r}"
            )
        if ledger_state is not None:
            memory.ledger = PromptLedger()
            memory.ledger.load_state_dict(ledger_state)
        if estimator_state is not None:
            memory.estimator_state = EstimatorState.from_state_dict(estimator_state)
        return memory

    def with_ledger(self, on: bool) -> RunMemory:
        """This memory with the ledger a run asked for: kept (or started) when ``on``,
        dropped otherwise (a run may resume with the ledger turned on or off)."""
        if not on:
            self.ledger = None
        elif self.ledger is None:
            self.ledger = PromptLedger()
        return self


_MEMORY_VERSION = 1


#: The trainer's side of :meth:`LastResponses.rho`. ``ResponsesNow(rows)``: the step's
#: responses at those rows of the batch: a handle for each (what ``Rescore`` takes: the
#: tokens, on the host) and its token log-probs under the current policy (1-D, the
#: response's tokens only). ``Rescore(handles)``: the token log-probs of earlier responses
#: under the current policy, in the same layout. ``Share``: on several processes, every
#: process's drifts, merged (each measures the prompts whose last response it holds).
ResponsesNow = Callable[[list[int]], tuple[list[Any], list[np.ndarray]]]
Rescore = Callable[[list[Any]], list[np.ndarray]]
Share = Callable[[dict[Any, float]], dict[Any, float]]


class LastResponses:
    """SPO's KL-adaptive forgetting (``rho="kl"``), measured from the trainer's log-probs.

    Per prompt it keeps the prompt's last response (its last row in the last step that
    scored it) and that response's token log-probs then. At each training step, a prompt
    seen before has that response scored again by the current policy; its drift D is the
    mean |Δ log-prob| over the response's tokens, and its ρ = clip(2^(-D/0.06), 0.875, 0.96)
    (:func:`advbudget.core.spo_rho`): a policy that moved far on a prompt forgets the
    prompt's old successes faster. A prompt seen for the first time has D = 0. Then the
    step's last responses replace the ones kept.

    Choice: SPO's reference measures after the actor update, adapters measure when they
    compute the advantages, before it; so D spans the updates between the prompt's two
    scorings, without this step's own. One extra forward pass over one response per prompt
    of the step (1/G of the batch). The responses are kept in memory only, as the reference
    keeps them: after a resume, a prompt counts as first seen until it comes back.

    Examples:
        >>> import numpy as np
        >>> kept = LastResponses()
        >>> now = lambda rows: ([f"response {r}" for r in rows], [np.zeros(2) for _ in rows])
        >>> rescore = lambda handles: [np.array([0.03, 0.09]) for _ in handles]
        >>> rho, metrics = kept.rho(["a", "a", "b"], now, rescore)
        >>> rho.tolist(), metrics["spo_first_seen_fraction"]
        ([0.96, 0.96, 0.96], 1.0)
        >>> rho, metrics = kept.rho(["b", "c"], now, rescore)  # b's drift: 0.06, c's first
        >>> rho.tolist(), metrics["spo_drift_mean"]
        ([0.875, 0.96], 0.03)
    """

    def __init__(self) -> None:
        self._kept: dict[Any, tuple[Any, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def rho(
        self,
        row_prompts: Sequence[Any],
        now: ResponsesNow,
        rescore: Rescore,
        *,
        local: range | None = None,
        share: Share | None = None,
        prefix: str = "",
    ) -> tuple[np.ndarray, dict[str, float]]:
        """The step's ρ per row (equal on a prompt's rows), and its metrics
        (``spo_drift_mean``, ``spo_rho_mean``, ``spo_first_seen_fraction``, over the
        step's prompts, ``prefix``-ed); the step's last responses are kept. ``local``: the
        rows whose responses this process holds (every row by default); ``rescore`` is
        called on every process, with no handle too (a sharded model needs every rank)."""
        last: dict[Any, int] = {}
        for row, prompt in enumerate(row_prompts):
            last[prompt] = row
        seen = [prompt for prompt in last if prompt in self._kept]
        again = rescore([self._kept[prompt][0] for prompt in seen])
        drift = {
            prompt: _mean_drift(self._kept[prompt][1], logps, prompt)
            for prompt, logps in zip(seen, again, strict=True)
        }
        if share is not None:
            drift = share(drift)
        drifts = np.array([drift.get(prompt, 0.0) for prompt in last])
        by_prompt = dict(zip(last, spo_rho(drifts).tolist(), strict=True))

        mine = [p for p in last if local is None or last[p] in local]
        handles, logps = now([last[p] for p in mine])
        for prompt in last:  # replaced here, or now kept by the process that holds it
            self._kept.pop(prompt, None)
        for prompt, handle, values in zip(mine, handles, logps, strict=True):
            self._kept[prompt] = (handle, np.asarray(values, dtype=np.float32))
        metrics = {
            "spo_drift_mean": float(drifts.mean()),
            "spo_rho_mean": float(np.mean(list(by_prompt.values()))),
            "spo_first_seen_fraction": 1.0 - len(drift) / len(last),
        }
        rho = np.array([by_prompt[prompt] for prompt in row_prompts])
        return rho, {prefix + key: value for key, value in metrics.items()}


def score_by_shape(
    handles: Sequence[Any],
    shape: Callable[[Any], Hashable],
    score: Callable[[list[Any]], Sequence[np.ndarray]],
) -> list[np.ndarray]:
    """A :data:`Rescore` from a forward pass that takes responses of one shape: ``score``
    called once per ``shape(handle)`` (a framework pads each step's responses to that
    step's widths, so kept responses of several steps differ), the results in the order of
    ``handles``.

    Examples:
        >>> calls = []
        >>> score = lambda hs: calls.append(len(hs)) or [np.array([len(h)]) for h in hs]
        >>> [a.tolist() for a in score_by_shape(["ab", "c", "de"], len, score)], calls
        ([[2], [1], [2]], [2, 1])
    """
    out: list[np.ndarray] = [np.zeros(0)] * len(handles)
    shapes: dict[Hashable, list[int]] = {}
    for at, handle in enumerate(handles):
        shapes.setdefault(shape(handle), []).append(at)
    for members in shapes.values():
        scored = score([handles[at] for at in members])
        for at, values in zip(members, scored, strict=True):
            out[at] = values
    return out


def _mean_drift(before: np.ndarray, after: np.ndarray, prompt: Any) -> float:
    """D of one response: the mean |Δ log-prob| over its tokens (0 with none)."""
    after = np.asarray(after, dtype=np.float64)
    if after.shape != before.shape:
        raise RuntimeError(
            f"rho='kl': prompt {prompt!r}'s last response came back with {after.shape} "
            f"token log-probs, it had {before.shape}"
        )
    return float(np.abs(after - before).mean()) if after.size else 0.0


def _no_prompts(spec: EstimatorSpec, where: str) -> ValueError:
    """The error of an estimator with memory called without a prompt per rollout."""
    return ValueError(
        f"prompt_ids: estimator {spec.name!r} remembers each prompt across steps and needs "
        f"a stable identity per rollout; {where}"
    )


def check_memory(
    spec: EstimatorSpec | None,
    options: AdapterOptions,
    key: Callable[[str], str],
    *,
    unnamed: str = "",
) -> None:
    """Refuse what an estimator with memory cannot do: ``skipped_groups="resample"``
    scores a step's prompts once per generation round and again on the assembled batch,
    and each scoring would update the memory; ``rho="kl"`` is ``spo``'s alone (``spec``
    None: an estimator not in advbudget's catalogue, the framework's own unless
    ``unnamed`` says what it is, which takes no rho either). ``key`` gives the framework's
    key of an option."""
    if spec is None:
        if options.kl_rho:
            what = unnamed or f"{options.framework}'s own estimator"
            raise ValueError(
                f"{key('rho')}: 'kl' is spo's KL-adaptive forgetting; {what} takes no rho "
                "(choose advbudget's spo)"
            )
        return
    if spec.tracker is not None and options.skipped_groups == "resample":
        raise ValueError(
            f"{key('skipped_groups')}: estimator {spec.name!r} remembers each prompt across "
            "steps, which 'resample' would update once per generation round; expected "
            "'keep' or 'drop', got 'resample'"
        )
    if options.kl_rho and spec.option("rho") is None:
        raise ValueError(
            f"{key('rho')}: 'kl' is spo's KL-adaptive forgetting; estimator {spec.name!r} "
            "takes no rho"
        )


def kappa_due(options: AdapterOptions, step_number: int) -> bool:
    """Whether κ_eff is measured after update ``step_number`` (counted from 1)."""
    return options.kappa_every > 0 and step_number % options.kappa_every == 0


def kappa_rows(step: Step) -> KappaPairs:
    """κ_eff's pairs: each kept group's o+ and o- (first highest and lowest advantage;
    skipped groups and rollouts without a reward give none)."""
    return kappa_pairs(step.result)


def dropped_rows(step: Step) -> list[int]:
    """The rows ``drop`` leaves out of the update (a skipped group's, a NaN reward's under
    ``nan_policy="omit"``): none unless the run asked for drop or resample."""
    if step.options.skipped_groups == "keep":
        return []
    return [int(row) for row in np.flatnonzero(~to_host(step.result.valid).astype(bool))]


def kept_groups(result: AdvantageResult, groups: range | None = None) -> list[int]:
    """The groups (of ``groups``, default all) the estimator did not skip, in order."""
    skipped = to_host(result.group_skipped).tolist()
    return [g for g in (range(len(skipped)) if groups is None else groups) if not skipped[g]]


@dataclass(frozen=True)
class ResamplePlan:
    """Which groups a resampled step trains on: ``picks`` (round, group) in round order,
    kept groups first, filled up with skipped ones (dropped) when ``short`` of them."""

    picks: list[tuple[int, int]]
    short: int


def resample_plan(kept: Sequence[Sequence[int]], need: int, groups_per_round: int) -> ResamplePlan:
    """The step's groups after ``len(kept)`` generation rounds: ``kept[r]`` are the kept
    groups of round ``r`` (each of ``groups_per_round``); the first ``need`` kept ones in
    round order, then, when fewer, skipped ones in round order (``drop`` leaves them out).

    Examples:
        >>> resample_plan([[1], [0, 2]], need=3, groups_per_round=3)
        ResamplePlan(picks=[(0, 1), (1, 0), (1, 2)], short=0)
        >>> resample_plan([[2], []], need=3, groups_per_round=3)
        ResamplePlan(picks=[(0, 2), (0, 0), (0, 1)], short=2)
    """
    picks = [(r, g) for r, groups in enumerate(kept) for g in groups][:need]
    short = need - len(picks)
    if short:
        chosen = set(picks)
        fillers = [
            (r, g)
            for r in range(len(kept))
            for g in range(groups_per_round)
            if (r, g) not in chosen
        ]
        picks += fillers[:short]
    return ResamplePlan(picks, short)


def may_resample(options: AdapterOptions, rounds: int, short: int) -> bool:
    """Whether ``resample`` generates another round: groups are still missing and the
    rounds so far are under ``max_generation_batches``."""
    return short > 0 and rounds < options.max_generation_batches


def resample_shortfall(found: int, total: int, rounds: int, options: AdapterOptions) -> str:
    """The warning of a step that ran out of rounds before it had enough kept groups.

    Examples:
        >>> from advbudget.adapters._options import AdapterOptions
        >>> print(resample_shortfall(5, 8, 2, AdapterOptions("trl", max_generation_batches=2)))
        skipped_groups='resample' found 5 of 8 kept groups in 2 generation rounds
        (max_generation_batches=2); the step trains on them and drops the 3 skipped groups
        that fill the batch
    """
    return (
        f"skipped_groups='resample' found {found} of {total} kept groups in {rounds} "
        f"generation rounds (max_generation_batches={options.max_generation_batches}); the "
        f"step trains on them and drops the {total - found} skipped groups that fill the batch"
    )


def sampled_group_metrics(steps: Sequence[Step]) -> dict[str, float]:
    """The group fractions over every group a resampled step generated (the batch it
    trains on holds kept groups only, so its own fractions say nothing of the prompts)."""
    if not steps:
        return {}
    prefix, solved_reward = steps[0].prefix, steps[0].options.solved_reward
    groups = sum(step.result.num_groups for step in steps)
    skipped = sum(int(to_host(step.result.group_skipped).sum()) for step in steps)
    metrics = {prefix + "skipped_group_fraction": skipped / groups}
    if solved_reward is not None:
        counts = dict.fromkeys(("scored", "unsolved", "solved"), 0)
        for step in steps:
            outcomes = group_outcomes(step.result, solved_reward)
            for key in counts:
                counts[key] += int(to_host(getattr(outcomes, key)).sum())
        for key in ("unsolved", "solved"):
            value = counts[key] / counts["scored"] if counts["scored"] else math.nan
            metrics[f"{prefix}{key}_group_fraction"] = value
    return defined(metrics)


class _Published(threading.local):
    result: AdvantageResult | None = None


_PUBLISHED = _Published()


def publish(result: AdvantageResult) -> None:
    """Hand the result an estimator call just computed to the hooks that run after it in
    this thread (the framework calls the estimator, then its own code, then our hooks):
    the one channel from the estimator to the step's features."""
    _PUBLISHED.result = result


def forget_published() -> None:
    """Drop a result left in this thread (a step that starts anew counts only its own)."""
    _PUBLISHED.result = None


def take_published(rows: int) -> AdvantageResult | None:
    """The result :func:`publish` left in this thread, once (then cleared), when it has
    ``rows`` rows; None otherwise (the framework's own estimator ran, or another batch)."""
    result, _PUBLISHED.result = _PUBLISHED.result, None
    if result is None or int(result.advantages.shape[0]) != rows:
        return None
    return result


#: What :func:`lend_memory` lends as ``rho``: the step's ρ per row, or a function that
#: measures it when the estimator asks (a framework whose step has no responses yet when
#: the loan starts: tunix's).
LentRho = np.ndarray | Callable[[], np.ndarray] | None


@dataclass(frozen=True)
class _Loan:
    memory: RunMemory
    row_prompts: Sequence[Any]
    remember: bool
    rho: LentRho


class _Lent(threading.local):
    loan: _Loan | None = None


_LENT = _Lent()


@contextlib.contextmanager
def lend_memory(
    memory: RunMemory,
    row_prompts: Sequence[Any],
    *,
    remember: bool = True,
    rho: LentRho = None,
) -> Iterator[None]:
    """For a framework that calls the estimator itself with the rewards alone (tunix,
    verl): the run's memory, the step's prompt of each row and (``rho="kl"``) its ρ per
    row, or a function that measures it when an estimator with memory is called, lent to
    the estimator calls made in this thread while the block runs (:func:`lent_keywords`):
    the way back of :func:`publish`."""
    previous, _LENT.loan = _LENT.loan, _Loan(memory, row_prompts, remember, rho)
    try:
        yield
    finally:
        _LENT.loan = previous


def lent_prompts() -> Sequence[Any] | None:
    """The prompt of each row that :func:`lend_memory` lent this thread (None outside
    it): what a probe of the estimator calls records."""
    return None if _LENT.loan is None else _LENT.loan.row_prompts


def lent_rho() -> np.ndarray | None:
    """The ρ per row that :func:`lend_memory` lent this thread (None outside it, without
    ``rho="kl"``, or when a function measures it on call): what a probe records."""
    loan = _LENT.loan
    return loan.rho if loan is not None and isinstance(loan.rho, np.ndarray) else None


def lent_keywords(spec: EstimatorSpec, rows: int, where: str) -> dict[str, Any]:
    """Inside an estimator call: the :func:`~advbudget.compute_advantages` keywords of an
    estimator with memory, from what :func:`lend_memory` lent this thread (prompts of
    another batch than the ``rows`` rewards count as none); none for the others."""
    if spec.tracker is None:
        return {}
    loan = _LENT.loan
    if loan is None or len(loan.row_prompts) != rows:
        raise _no_prompts(spec, where)
    rho = loan.rho() if callable(loan.rho) else loan.rho
    return loan.memory.keywords(spec, loan.row_prompts, where, remember=loan.remember, rho=rho)


class _LentVersions(threading.local):
    keywords: Mapping[str, Any] | None = None


_VERSIONS = _LentVersions()


@contextlib.contextmanager
def lend_versions(
    options: AdapterOptions, policy_versions: Sequence[int], current: int
) -> Iterator[None]:
    """For a framework that calls the estimator itself with the rewards alone (tunix's
    agentic learner): each rollout's policy version, the trainer's current one and the
    run's staleness rule, lent to the estimator calls made in this thread while the block
    runs (:func:`lent_versions`)."""
    keywords = options.staleness_keywords(list(policy_versions), current)
    previous, _VERSIONS.keywords = _VERSIONS.keywords, keywords
    try:
        yield
    finally:
        _VERSIONS.keywords = previous


def lent_versions(rows: int) -> dict[str, Any]:
    """Inside an estimator call: the :func:`~advbudget.compute_advantages` staleness
    keywords :func:`lend_versions` lent this thread, for ``rows`` rewards ({} outside it).
    Versions of another number of rollouts are an error: the estimator would score rows
    against versions that are not theirs."""
    keywords = _VERSIONS.keywords
    if keywords is None:
        return {}
    lent = len(keywords["policy_versions"])
    if lent != rows:
        raise ValueError(
            f"policy_versions: expected one version per rollout of this estimator call "
            f"({rows}), got {lent} lent by the learner"
        )
    return dict(keywords)
