"""One float64 reference per estimator of the catalogue, in one table.

Each is a slow, obvious Python loop over the groups, written from the formula (SPEC.md,
the paper, or the framework's code), sharing nothing with ``advbudget.core``: not even
the option defaults, which :data:`DEFAULTS` writes out by hand, so a default changed in the
catalogue fails the battery. ``tests/test_conformance.py`` runs every catalogue entry
against its reference on every layout and backend; an estimator without one fails there.
This is the tests' one oracle of advantages.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from advbudget import get_spec

#: Each estimator's options and their defaults (SPEC.md; a mirror's are its framework's
#: constants), as the reference takes them when a call does not set them.
DEFAULTS: dict[str, dict[str, Any]] = {
    "budget": {"budget": 1.0},
    "grpo": {"eps": 1e-6, "std_correction": 1},
    "dr": {},
    "rloo": {},
    "maxrl": {"eps": 1e-6},
    "dgpo": {"eps": 1e-4, "temperature": 2.0, "dqw": True},
    "opo": {},
    "grpo_passk": {"norm_adv_by_std": True, "eps": 1e-6, "std_correction": 1},
    "passk": {"k": 4, "eps": 1e-6, "norm_by_std": True},
    "gpg": {"f_norm": 1.0},
    "reinforce_plus_plus_baseline": {
        "std_correction": 1, "var_eps": 1e-8, "var_floor": 0.0, "std_norm": True,
    },
    "reinforce_baseline": {
        "std_correction": 0, "var_eps": 0.0, "var_floor": 1e-8, "std_norm": True,
    },
    "reinforce": {"std_correction": 0, "var_eps": 0.0, "var_floor": 1e-8, "std_norm": True},
    "grpo_batch_std": {"eps": 1e-4, "std_correction": 1},
    "rloo_normalized": {"eps": 1e-4, "std_correction": 1},
    "gdpo": {"eps": 1e-6, "std_correction": 1, "weights": None, "var_eps": 1e-8, "std_eps": 0.0},
    "remax": {},
    "spo": {"rho": 0.875, "prior": (0.5, 0.5), "eps": 1e-8},
    "rae": {"decay": 0.95},
    "gigpo": {"gamma": 1.0, "omega": 1.0, "mode": "mean_norm", "eps": 1e-6},
}  # fmt: skip


@dataclass
class Batch:
    """A batch as the references see it: float64 rewards (``[N, K]`` for an estimator of
    reward components), the members of each group (in order of first appearance), extra
    inputs, and the caller's singleton and tie rules."""

    rewards: np.ndarray
    members: list[np.ndarray]
    inputs: dict[str, np.ndarray]
    singletons: str
    tie: float
    memory: dict[Any, tuple[float, ...]] | None = None
    prompt_ids: list[Any] | None = None
    trajectory_ids: list[Any] | None = None

    def by_prompt(self) -> dict[Any, np.ndarray]:
        """The rows of each prompt of ``prompt_ids``, in order of first appearance."""
        rows: dict[Any, list[int]] = {}
        for i, prompt in enumerate(self.prompt_ids or ()):
            rows.setdefault(prompt, []).append(i)
        return {prompt: np.asarray(idx) for prompt, idx in rows.items()}

    def tied(self, r: np.ndarray) -> bool:
        return bool(r.max() - r.min() <= self.tie + self.tie * max(abs(r.max()), abs(r.min())))

    def per_group(
        self,
        formula: Callable[[np.ndarray, np.ndarray], np.ndarray],
        *,
        raw_scale: float = 1.0,
        skip_ties: bool = True,
    ) -> np.ndarray:
        """``formula(group rewards, group indices)`` for every group with a reward gap
        (every group of two or more when ``skip_ties`` is False); a group of one gets
        ``r / raw_scale`` under ``singletons="raw"`` and 0 otherwise."""
        out = np.zeros(len(self.rewards))
        for idx in self.members:
            r = self.rewards[idx]
            if len(r) == 1:
                out[idx] = r / raw_scale if self.singletons == "raw" else 0.0
            elif not (skip_ties and self.tied(r)):
                out[idx] = formula(r, idx)
        return out


Reference = Callable[[Batch, dict[str, Any]], np.ndarray]
REFERENCES: dict[str, Reference] = {}


def reference_of(name: str) -> Callable[[Reference], Reference]:
    def add(fn: Reference) -> Reference:
        REFERENCES[name] = fn
        return fn

    return add


def _std(r: np.ndarray, correction: int) -> float:
    dof = len(r) - correction
    return math.sqrt(float(np.sum((r - r.mean()) ** 2)) / dof) if dof > 0 else 0.0


def _whiten(values: np.ndarray, weights: np.ndarray | None, o: dict[str, Any]) -> np.ndarray:
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    mean = float(np.sum(w * values) / np.sum(w))
    if not o["std_norm"]:
        return values - mean
    dof = float(np.sum(w)) - o["std_correction"]
    var = float(np.sum(w * (values - mean) ** 2)) / dof if dof > 0 else 0.0
    denominator = max(var + o["var_eps"], o["var_floor"])
    return (values - mean) / math.sqrt(denominator) if denominator > 0 else 0 * values


# -- group-relative ------------------------------------------------------------------------


@reference_of("budget")
def _budget(b: Batch, o: dict[str, Any]) -> np.ndarray:
    def f(r: np.ndarray, idx: np.ndarray) -> np.ndarray:
        gaps = r - r.min()
        return o["budget"] * gaps / gaps.sum() - o["budget"] / len(r)

    return b.per_group(f)


@reference_of("grpo")
def _grpo(b: Batch, o: dict[str, Any]) -> np.ndarray:
    return b.per_group(
        lambda r, idx: (r - r.mean()) / (_std(r, o["std_correction"]) + o["eps"]),
        raw_scale=1 + o["eps"],
    )


@reference_of("dr")
def _dr(b: Batch, o: dict[str, Any]) -> np.ndarray:
    return b.per_group(lambda r, idx: r - r.mean())


@reference_of("rloo")
def _rloo(b: Batch, o: dict[str, Any]) -> np.ndarray:
    return b.per_group(lambda r, idx: np.array([x - (r.sum() - x) / (len(r) - 1) for x in r]))


@reference_of("maxrl")
def _maxrl(b: Batch, o: dict[str, Any]) -> np.ndarray:
    # SkyRL's compute_maxrl_advantage; a group of one is r - 0 there (singletons="raw").
    return b.per_group(lambda r, idx: (r - r.mean()) / (r.mean() + o["eps"]))


@reference_of("opo")
def _opo(b: Batch, o: dict[str, Any]) -> np.ndarray:
    def f(r: np.ndarray, idx: np.ndarray) -> np.ndarray:
        w = b.inputs["response_lengths"][idx]
        return r - (np.sum(w * r) / np.sum(w) if np.sum(w) > 0 else r.mean())

    return b.per_group(f)


def solved_share(r: np.ndarray, tie: float, solved_reward: float = 1.0) -> float:
    """The fraction of ``r`` at or above ``solved_reward`` (within the tie tolerance)."""
    threshold = solved_reward - (tie + tie * abs(solved_reward))
    return float(np.mean(r >= threshold))


def dqw(shares: list[float], temperature: float) -> list[float]:
    """DGPO's question weights of the kept groups' solved shares (0 counts as 1)."""
    terms = [math.exp(-(share if share > 0 else 1.0) / temperature) for share in shares]
    return [len(shares) * term / sum(terms) for term in terms]


@reference_of("dgpo")
def _dgpo(b: Batch, o: dict[str, Any]) -> np.ndarray:
    def f(r: np.ndarray, idx: np.ndarray) -> np.ndarray:
        centred = r - r.mean()
        return len(r) * centred / (np.abs(centred).sum() + o["eps"])

    out = b.per_group(f)
    kept = [idx for idx in b.members if len(idx) > 1 and not b.tied(b.rewards[idx])]
    if o["dqw"] and kept:
        shares = [solved_share(b.rewards[idx], b.tie) for idx in kept]
        for idx, weight in zip(kept, dqw(shares, o["temperature"]), strict=True):
            out[idx] *= weight
    return out


# -- pass@k ----------------------------------------------------------------------------------


@reference_of("grpo_passk")
def _grpo_passk(b: Batch, o: dict[str, Any]) -> np.ndarray:
    def f(r: np.ndarray, idx: np.ndarray) -> np.ndarray:
        a = np.zeros(len(r))
        best = int(np.argmax(r))
        if np.sum(r == r[best]) == 1:
            gain = r[best] - np.max(np.delete(r, best))
            if o["norm_adv_by_std"]:
                gain /= _std(r, o["std_correction"]) + o["eps"]
            a[best] = gain
        return a

    return b.per_group(f)


@reference_of("passk")
def _passk(b: Batch, o: dict[str, Any]) -> np.ndarray:
    # arXiv 2508.10751, eqs. 14-15, as RUCAIBox/Passk_Training's calc_adv computes them.
    k, comb = o["k"], math.comb

    def f(r: np.ndarray, idx: np.ndarray) -> np.ndarray:
        n, c = len(r), int(np.sum(r == r.max()))
        rho = 1 - comb(n - c, k) / comb(n, k)
        sigma = math.sqrt(rho * (1 - rho)) + o["eps"] if o["norm_by_std"] else 1.0
        positive = (1 - rho) / sigma
        negative = (1 - rho - comb(n - c - 1, k - 1) / comb(n - 1, k - 1)) / sigma
        return np.where(r == r.max(), positive, negative)

    return b.per_group(f)


# -- batch statistics ----------------------------------------------------------------------


@reference_of("gpg")
def _gpg(b: Batch, o: dict[str, Any]) -> np.ndarray:
    alpha = len(b.rewards) / max(1, int(np.count_nonzero(b.rewards)))
    return alpha * _dr(b, o) / o["f_norm"]


def _whitened_baseline(b: Batch, o: dict[str, Any]) -> np.ndarray:
    centred = b.per_group(lambda r, idx: r - r.mean(), skip_ties=False)
    return _whiten(centred, b.inputs.get("response_lengths"), o)


REFERENCES["reinforce_plus_plus_baseline"] = _whitened_baseline
REFERENCES["reinforce_baseline"] = _whitened_baseline


@reference_of("reinforce")
def _reinforce(b: Batch, o: dict[str, Any]) -> np.ndarray:
    return _whiten(b.rewards, b.inputs.get("response_lengths"), o)


@reference_of("grpo_batch_std")
def _grpo_batch_std(b: Batch, o: dict[str, Any]) -> np.ndarray:
    return _dr(b, o) / (_std(b.rewards, o["std_correction"]) + o["eps"])


@reference_of("rloo_normalized")
def _rloo_normalized(b: Batch, o: dict[str, Any]) -> np.ndarray:
    # Groups of one are left out of the batch statistics and get 0 (TRL: NaN baseline).
    a = b.per_group(lambda r, idx: np.array([x - (r.sum() - x) / (len(r) - 1) for x in r]))
    in_stats = np.zeros(len(b.rewards), dtype=bool)
    kept = np.zeros(len(b.rewards), dtype=bool)
    for idx in b.members:
        in_stats[idx] = len(idx) > 1
        kept[idx] = len(idx) > 1 and not b.tied(b.rewards[idx])
    if not in_stats.any():
        return a
    part = a[in_stats]
    whitened = (a - part.mean()) / (_std(part, o["std_correction"]) + o["eps"])
    return np.where(kept, whitened, 0.0)


@reference_of("gdpo")
def _gdpo(b: Batch, o: dict[str, Any]) -> np.ndarray:
    # verl's compute_gdpo_outcome_advantage: grpo on each component (rewards [N, K]), the
    # weighted sum, then masked_whiten over the tokens (TRL: over rollouts, std + 1e-4).
    count = b.rewards.shape[1]
    total = np.zeros(len(b.rewards))
    for k, w in enumerate(o["weights"] or [1.0] * count):
        total += w * _grpo(dataclasses.replace(b, rewards=b.rewards[:, k]), o)
    w = b.inputs.get("response_lengths", np.ones(len(total)))
    mean = float(np.sum(w * total) / np.sum(w))
    dof = float(np.sum(w)) - o["std_correction"]
    var = float(np.sum(w * (total - mean) ** 2)) / dof if dof > 0 else 0.0
    scale = math.sqrt(var + o["var_eps"]) + o["std_eps"]
    return (total - mean) / scale if scale > 0 else 0 * total


# -- a baseline from outside -----------------------------------------------------------------


@reference_of("remax")
def _remax(b: Batch, o: dict[str, Any]) -> np.ndarray:
    return b.rewards - b.inputs["reward_baselines"]


# -- memory across steps (the rules as written: score first, then one update per prompt) -------


@reference_of("spo")
def _spo(b: Batch, o: dict[str, Any]) -> np.ndarray:
    memory, ids = b.memory, b.prompt_ids
    assert memory is not None
    assert ids is not None
    p_hat = np.array([memory.get(k, o["prior"]) for k in ids])
    a = b.rewards - p_hat[:, 0] / (p_hat[:, 0] + p_hat[:, 1])
    out = (a - a.mean()) / (_std(a, 1) + o["eps"])
    for prompt, idx in b.by_prompt().items():
        alpha, beta = memory.get(prompt, o["prior"])
        r = b.rewards[idx]
        memory[prompt] = (o["rho"] * alpha + r.sum(), o["rho"] * beta + (1 - r).sum())
    return out


@reference_of("rae")
def _rae(b: Batch, o: dict[str, Any]) -> np.ndarray:
    memory, ids = b.memory, b.prompt_ids
    assert memory is not None
    assert ids is not None
    out = b.rewards - np.array([memory.get(k, (0.0,))[0] for k in ids])
    for prompt, idx in b.by_prompt().items():
        (old,) = memory.get(prompt, (0.0,))
        memory[prompt] = (o["decay"] * old + (1 - o["decay"]) * b.rewards[idx].mean(),)
    return out


# -- turns of multi-turn trajectories --------------------------------------------------------


@reference_of("gigpo")
def _gigpo(b: Batch, o: dict[str, Any]) -> np.ndarray:
    # verl-agent's compute_gigpo_outcome_advantage, row by row with dicts: the episode
    # reward on every row, statistics across the group's rows; discounted step returns
    # grouped by (prompt, anchor). A trajectory without a reward is left out (nan_policy
    # "omit"); a step group within the tie tolerance gets 0, as a tied group does here.
    trajs, anchors = b.trajectory_ids, b.inputs["anchor_ids"]
    assert trajs is not None
    n = len(b.rewards)
    prompt = [0] * n
    for k, idx in enumerate(b.members):
        for i in idx:
            prompt[i] = k
    reward: dict[Any, float] = {}
    for i in range(n):
        if not math.isnan(b.rewards[i]):
            reward[trajs[i]] = float(b.rewards[i])
    scored = [trajs[i] in reward for i in range(n)]
    normed = o["mode"] == "mean_std_norm"

    def normalise(values: list[float], x: float, alone: float) -> float:
        if len(values) == 1:
            return alone
        if len(set(values)) == 1:  # exactly 0 (a float mean of equal values may be an ulp off)
            return 0.0
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        return (x - mean) / (std + o["eps"]) if normed else x - mean

    by_prompt: dict[int, list[float]] = {}
    for i in range(n):
        if scored[i]:
            by_prompt.setdefault(prompt[i], []).append(reward[trajs[i]])
    returns = [0.0] * n
    rows_of: dict[Any, list[int]] = {}
    for i in range(n):
        rows_of.setdefault(trajs[i], []).append(i)
    for rows in rows_of.values():
        running = 0.0
        for i in reversed(rows):
            running = b.inputs["turn_rewards"][i] + o["gamma"] * running
            returns[i] = running
    steps: dict[tuple[int, Any], list[float]] = {}
    for i in range(n):
        if scored[i]:
            steps.setdefault((prompt[i], anchors[i]), []).append(returns[i])
    out = np.zeros(n)
    for i in range(n):
        if not scored[i]:
            continue
        r = reward[trajs[i]]
        lone = r / (1 + o["eps"] if normed else 1.0) if b.singletons == "raw" else 0.0
        episode = normalise(by_prompt[prompt[i]], r, lone)
        group = steps[(prompt[i], anchors[i])]
        step = 0.0 if b.tied(np.array(group)) else normalise(group, returns[i], 0.0)
        out[i] = episode + o["omega"] * step
    return out


def reference(
    name: str,
    rewards: Iterable[float],
    labels: Iterable[Any],
    *,
    singletons: str = "skip",
    tie: float = 1e-6,
    memory: dict[Any, tuple[float, ...]] | None = None,
    prompt_ids: list[Any] | None = None,
    trajectory_ids: list[Any] | None = None,
    **given: Any,
) -> np.ndarray:
    """The float64 advantages of estimator ``name``: its options default to
    :data:`DEFAULTS`, its extra inputs (``response_lengths=``, ...) are given as arrays (labels
    as they are). A stateful estimator reads and updates ``memory`` (prompt -> its
    values), keyed by ``prompt_ids``; an estimator of turns reads ``trajectory_ids`` (one
    per row, ``labels`` being the rows' prompts)."""
    spec = get_spec(name)
    if spec.name not in REFERENCES:
        raise KeyError(f"no float64 reference for estimator {spec.name!r} in tests/references.py")
    options = {
        option: given.pop(option, default) for option, default in DEFAULTS[spec.name].items()
    }
    inputs = {i.name: np.asarray(given.pop(i.name)) for i in spec.inputs if i.name in given}
    inputs = {k: v.astype(np.float64) if v.dtype.kind in "biuf" else v for k, v in inputs.items()}
    if given:
        raise TypeError(f"not an option or input of {spec.name}: {sorted(given)}")
    members: dict[Any, list[int]] = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    batch = Batch(
        rewards=np.asarray(list(rewards), dtype=np.float64),
        members=[np.asarray(m) for m in members.values()],
        inputs=inputs,
        singletons=singletons,
        tie=tie,
        memory=memory,
        prompt_ids=prompt_ids,
        trajectory_ids=trajectory_ids,
    )
    return REFERENCES[spec.name](batch, options)
