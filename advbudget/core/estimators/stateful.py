"""Estimators that remember prompts across steps: each rollout is scored against a
baseline its prompt's earlier rewards built (``state=``, ``prompt_ids=``; see
:class:`advbudget.EstimatorState`). Each declares a :class:`~.._state.Tracker` beside its
function: what it remembers per prompt, the prior of an unseen prompt, the update."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ... import checks
from .._arrays import Array, to_host
from .._state import PromptBatch, Tracker, per_rollout
from .._stats import GroupedRewards, batch_whiten
from ._spec import EstimatorSpec, Rule, declare_into

SPECS: list[EstimatorSpec] = []
declare = declare_into(SPECS)


def _number_or_rows(check: Any) -> Any:
    """A rule for an option that is a number, or one value per rollout (checked when the
    call's prompts are known)."""

    def rule(name: str, value: Any) -> Any:
        if hasattr(value, "shape") or isinstance(value, (list, tuple)):
            return value
        return check(name, value)

    return rule


def _unit(name: str, value: Any) -> float:
    number = checks.finite(name, value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{name}: expected a number in [0, 1], got {value!r}")
    return number


#: The value of ``spo``'s ``rho`` that asks a trainer adapter for SPO's KL-adaptive
#: forgetting, measured from the trainer's log-probs (``adapters._features.LastResponses``).
KL_RHO = "kl"


def is_kl_rho(name: str, value: Any) -> bool:
    """Whether option ``name`` = ``value`` asks for the KL-adaptive ρ (``rho="kl"``).

    Examples:
        >>> is_kl_rho("rho", " KL"), is_kl_rho("rho", 0.9), is_kl_rho("decay", "kl")
        (True, False, False)
    """
    return name == "rho" and isinstance(value, str) and value.strip().lower() == KL_RHO


def _rho(name: str, value: Any) -> Any:
    """spo's ``rho``: a number in [0, 1] or one per rollout. :data:`KL_RHO` is an adapter's
    word: the core has no policy to measure the drift with, so it says what to pass."""
    if is_kl_rho("rho", value):
        raise ValueError(
            f"{name}: 'kl' is measured by a trainer adapter, which scores each prompt's "
            "last response again; here pass rho=advbudget.core.spo_rho(drift), one value "
            "per rollout (drift: the prompt's mean |Δ log-prob|), or a number in [0, 1]"
        )
    return _number_or_rows(_unit)(name, value)


def _unit_rows(name: str, values: np.ndarray) -> np.ndarray:
    bad = ~((values >= 0) & (values <= 1))
    if bad.any():
        at = int(np.argmax(bad))
        raise ValueError(f"{name}: expected values in [0, 1], got {values[at]!r} at {at}")
    return values


def _prior(name: str, value: Any) -> tuple[Any, Any]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(
            f"{name}: expected (alpha0, beta0): two positive numbers, or two arrays with one "
            f"value per rollout, got {value!r}"
        )
    alpha, beta = value
    for part in (alpha, beta):
        if not hasattr(part, "shape"):
            checks.positive_finite(name, part)
    return alpha, beta


# -- SPO --------------------------------------------------------------------------------


def _spo_check(batch: PromptBatch, options: Mapping[str, Any]) -> None:
    r = batch.rewards[batch.present]
    outside = (r < 0) | (r > 1)
    if outside.any():
        raise ValueError(
            f"rewards: estimator 'spo' counts successes and expects rewards in [0, 1], got "
            f"{float(r[np.argmax(outside)])!r} ({int(outside.sum())} of {r.size} rewards outside)"
        )


def _spo_start(batch: PromptBatch, options: Mapping[str, Any], unseen: np.ndarray) -> np.ndarray:
    n = len(batch.inverse)
    columns = []
    for part in options["prior"]:
        rows = per_rollout("prior", part, n)
        if not (np.isfinite(rows) & (rows > 0)).all():
            raise ValueError("prior: expected positive finite values (alpha0, beta0)")
        columns.append(rows[batch.first[unseen]])
    return np.stack(columns, axis=1)


def _spo_update(values: np.ndarray, batch: PromptBatch, options: Mapping[str, Any]) -> np.ndarray:
    rho = _unit_rows("rho", batch.per_prompt("rho", options["rho"]))
    successes = batch.reward_sum
    failures = batch.count - batch.reward_sum
    return np.stack([rho * values[:, 0] + successes, rho * values[:, 1] + failures], axis=1)


#: SPO's KL-adaptive forgetting, the reference's constants: the drift at which ρ halves,
#: and ρ's bounds (``rho.clip_lower`` and the fixed upper bound).
SPO_HALF_LIFE = 0.06
SPO_RHO_BOUNDS = (0.875, 0.96)


def spo_rho(
    drift: Any,
    *,
    clip_lower: float = SPO_RHO_BOUNDS[0],
    clip_upper: float = SPO_RHO_BOUNDS[1],
    half_life: float = SPO_HALF_LIFE,
) -> np.ndarray:
    """SPO's KL-adaptive forgetting factor ``clip(2^(-D / half_life), clip_lower,
    clip_upper)`` of each prompt, from its drift D >= 0: the mean |Δ log-prob| over the
    tokens of the prompt's last response, between the policy that scored it then and the
    current one (D = 0 for a prompt seen for the first time, so ρ = ``clip_upper``). A
    policy that moved far on a prompt forgets its old successes faster. Give the result,
    one value per rollout, as ``compute_advantages(..., "spo", rho=...)``; the trainer
    adapters compute it themselves with ``rho="kl"``.

    Examples:
        >>> spo_rho([0.0, 0.005, 0.06]).round(4).tolist()
        [0.96, 0.9439, 0.875]
    """
    values = to_host(drift).astype(np.float64, copy=False)
    bad = ~(np.isfinite(values) & (values >= 0))
    if bad.any():
        at = int(np.argmax(bad.reshape(-1)))
        raise ValueError(
            f"drift: expected finite values >= 0 (a mean |Δ log-prob|), got "
            f"{float(values.reshape(-1)[at])!r} at {at}"
        )
    lower = _unit("clip_lower", clip_lower)
    upper = _unit("clip_upper", clip_upper)
    if lower > upper:
        raise ValueError(f"clip_lower: expected at most clip_upper ({upper}), got {lower}")
    half = checks.positive_finite("half_life", half_life)
    rho: np.ndarray = np.clip(np.exp2(-values / half), lower, upper)
    return rho


SPO = Tracker(
    fields=("alpha", "beta"),
    start=_spo_start,
    scored=lambda values: values[:, 0] / (values[:, 0] + values[:, 1]),
    update=_spo_update,
    check=_spo_check,
)


@declare(
    name="spo",
    formula="whiten(r − p̂(prompt)) over the batch, p̂ = α/(α+β) a per-prompt Beta tracker "
    "updated after scoring: α ← ρα + Σr, β ← ρβ + Σ(1 − r)",
    reference="SPO, arXiv 2509.13232 (verl-project/verl-recipe spo/spo_ray_trainer.py)",
    rules={
        "rho": Rule(
            _rho,
            "forgetting factor in [0, 1], or one value per rollout (equal on a prompt's "
            "rollouts): SPO's KL-adaptive clip(2^(-D/0.06), 0.875, 0.96) from each "
            "prompt's drift D (`advbudget.core.spo_rho`; every trainer's adapter measures "
            'it with rho="kl")',
        ),
        "prior": Rule(
            _prior,
            "(α0, β0) of an unseen prompt, positive; or two arrays, one value per rollout "
            "(offline pass rates)",
        ),
        "eps": Rule(checks.positive_finite, "added to the batch std"),
    },
    skips="never",
    batch_statistics="the mean and unbiased std of r − p̂ over every rollout with a reward",
    tracker=SPO,
)
def spo(
    g: GroupedRewards,
    *,
    tracked: Array,
    rho: Any = 0.875,
    prior: Any = (0.5, 0.5),
    eps: float = 1e-8,
) -> Array:
    """SPO: ``(a - mean(a)) / (std(a) + eps)``, ``a = r - p̂``, p̂ the prompt's tracked
    success rate before this step (``rho`` and ``prior`` are the tracker's)."""
    return batch_whiten(g, g.only_present(g.rewards - tracked), correction=1, std_eps=eps)


# -- RAE --------------------------------------------------------------------------------


def _decay(name: str, value: Any) -> float:
    number = checks.finite(name, value)
    if not 0.0 <= number < 1.0:
        raise ValueError(f"{name}: expected a number in [0, 1), got {value!r}")
    return number


def _rae_update(values: np.ndarray, batch: PromptBatch, options: Mapping[str, Any]) -> np.ndarray:
    decay = options["decay"]
    mean = batch.reward_sum / np.where(batch.count > 0, batch.count, 1)
    updated: np.ndarray = (decay * values[:, 0] + (1 - decay) * mean)[:, None]
    return updated


RAE = Tracker(
    fields=("baseline",),
    start=lambda batch, options, unseen: np.zeros((len(unseen), 1)),
    scored=lambda values: values[:, 0],
    update=_rae_update,
)


@declare(
    name="rae",
    formula="r − b(prompt), b a per-prompt moving average of the mean reward, updated "
    "after scoring: b ← decay · b + (1 − decay) · mean(r)",
    reference="RAE, SPIRAL arXiv 2506.24119 (PrimeIntellect-ai/prime-rl algo/rae.py)",
    rules={"decay": Rule(_decay, "weight of the old baseline, in [0, 1)")},
    skips="never",
    tracker=RAE,
)
def rae(g: GroupedRewards, *, tracked: Array, decay: float = 0.95) -> Array:
    """RAE: ``r - b``, b the prompt's moving baseline before this step (0 when unseen)."""
    return g.only_present(g.rewards - tracked)
