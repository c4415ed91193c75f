"""Each framework's conventions, as data: one row per trainer, read by its adapter.

A framework names our estimators its own way (verl, OpenRLHF and tunix ``advbudget_<name>``,
TRL the core name) and computes the estimators it has itself with its own constants
(GRPO's eps, exact ties, verl's raw-reward groups of one). The rule, for every adapter:

- an estimator the framework has too (a *mirror*: ``own_names``) keeps the framework's
  conventions, so switching to our name changes no number;
- every other estimator (budget, a plugin's) keeps the core's defaults: ties within 1e-6
  are ties, a group of one is skipped.

Adapters contain no constants of their own: they call :meth:`Convention.settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._compute import DEFAULT_TIE_ATOL, DEFAULT_TIE_RTOL
from ._stats import Singletons
from .estimators import Estimator, EstimatorSpec, all_names, as_spec, estimator_specs, get_spec


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Convention:
    """How one framework computes the advantages it has, and how it names ours.

    Attributes:
        framework: ``"verl"``, ``"trl"``, ``"openrlhf"`` or ``"tunix"``.
        version: the framework versions the row was read from (and is tested against).
        own_names: core estimator -> the framework's own estimator computing the same
            advantages (its mirror).
        options: core estimator -> the framework's values of its options (mirrors only).
        singletons: how the framework scores a group of one (mirrors only).
        singletons_refused: the mirrors whose framework estimator (or its launcher) raises
            on a group of one: the mirror raises too (``singletons="refuse"``).
        returns: mirror -> what the framework's returns are the reward-to-go of where they
            are not the advantages: ``"reward"`` (the reward itself, no baseline), or a
            core estimator (its advantages: the shaping before a batch whitening).
        exact_ties: the framework skips only exactly equal rewards (mirrors only).
        prefix: our estimators' names in the framework are ``prefix + name`` for every
            name and alias in the catalogue.
        extra_names: further framework names (kept from earlier releases).
        metric_prefix: the key prefix of our metrics in the framework's logs.
        kappa_every: κ_eff is logged every this many steps by default (0: off).
        whole_batch: how the adapter hands the core the whole batch (for estimators with
            batch statistics).
        components: where the adapter finds a rollout's reward components (for
            estimators that take them, gdpo); "" where the framework keeps one reward per
            rollout: the adapter refuses those estimators.
    """

    framework: str
    version: str
    own_names: Mapping[str, str]
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    singletons: Singletons = "skip"
    singletons_refused: frozenset[str] = frozenset()
    returns: Mapping[str, str] = field(default_factory=dict)
    exact_ties: bool = True
    prefix: str = "advbudget_"
    extra_names: Mapping[str, str] = field(default_factory=dict)
    metric_prefix: str = "advbudget/"
    kappa_every: int = 10
    whole_batch: str = ""
    components: str = ""

    def name_of(self, estimator: str) -> str:
        """The framework's name for core estimator (or alias) ``estimator``.

        Examples:
            >>> from advbudget.core import get_convention
            >>> get_convention("verl").name_of("budget"), get_convention("trl").name_of("dr")
            ('advbudget_budget', 'dr')
        """
        return self.prefix + estimator

    def names(self) -> dict[str, str]:
        """Every framework name of our estimators -> its core name (the whole catalogue,
        plugins included)."""
        out = {self.name_of(name): get_spec(name).name for name in all_names()}
        out.update(self.extra_names)
        return out

    def core_name(self, name: str) -> str:
        """The core estimator behind framework name ``name``; a clear error if none."""
        known = self.names()
        if name not in known:
            raise ValueError(
                f"estimator: expected one of {', '.join(sorted(known))} in {self.framework}, "
                f"got {name!r}"
            )
        return known[name]

    def is_mirror(self, estimator: str | EstimatorSpec | Estimator) -> bool:
        """Whether the framework computes ``estimator`` itself."""
        spec = as_spec(estimator)
        return spec.name in self.own_names and get_spec(spec.name) is spec

    def settings(
        self, estimator: str | EstimatorSpec | Estimator, overrides: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Keyword arguments of :func:`~advbudget.compute_advantages` for ``estimator`` in
        this framework: the conventions above, then ``overrides`` (the user's options).

        Examples:
            >>> from advbudget.core import get_convention
            >>> get_convention("openrlhf").settings("grpo")  # OpenRLHF's group_norm
            {'tie_rtol': 0.0, 'tie_atol': 0.0, 'singletons': 'refuse', 'eps': 1e-09,
             'std_correction': 1}
            >>> get_convention("verl").settings("budget", {"budget": 0.5})
            {'tie_rtol': 1e-06, 'tie_atol': 1e-06, 'singletons': 'skip', 'budget': 0.5}
        """
        spec = as_spec(estimator)
        mirror = self.is_mirror(spec)
        exact = mirror and self.exact_ties
        singletons: Singletons = "skip"
        if mirror and spec.name in self.singletons_refused:
            singletons = "refuse"
        elif mirror and spec.raw_singletons:
            singletons = self.singletons
        out: dict[str, Any] = {
            "tie_rtol": 0.0 if exact else DEFAULT_TIE_RTOL,
            "tie_atol": 0.0 if exact else DEFAULT_TIE_ATOL,
            "singletons": singletons,
        }
        if mirror:
            out.update(self.options.get(spec.name, {}))
        out.update(overrides or {})
        return out

    def returns_of(self, estimator: str | EstimatorSpec | Estimator) -> str:
        """What the framework's returns are for ``estimator``: ``"advantages"`` (the same
        tensor, most estimators), ``"reward"`` (the reward-to-go of the reward itself) or
        a core estimator name (the reward-to-go of its advantages).

        Examples:
            >>> from advbudget.core import get_convention
            >>> verl = get_convention("verl")
            >>> verl.returns_of("remax"), verl.returns_of("grpo")
            ('reward', 'advantages')
        """
        spec = as_spec(estimator)
        return self.returns.get(spec.name, "advantages") if self.is_mirror(spec) else "advantages"

    def check_rewards(self, estimator: str | EstimatorSpec | Estimator, name: str) -> None:
        """Refuse, in one line, an estimator of reward components (gdpo) where the
        framework keeps one reward per rollout (``components`` empty); ``name`` is the
        framework's name for it.

        Examples:
            >>> from advbudget.core import get_convention
            >>> get_convention("openrlhf").check_rewards("gdpo", "advbudget_gdpo")
            Traceback (most recent call last):
            ...
            ValueError: estimator: advbudget_gdpo takes reward components (several rewards per
            rollout), which openrlhf does not keep: it gives each rollout one reward
        """
        if as_spec(estimator).components and not self.components:
            raise ValueError(
                f"estimator: {name} takes reward components (several rewards per rollout), "
                f"which {self.framework} does not keep: it gives each rollout one reward"
            )

    def option_names(self) -> list[str]:
        """Every option name of the catalogue (one flag or key each in the framework)."""
        seen: dict[str, None] = {}
        for spec in estimator_specs():
            for option in spec.options:
                seen.setdefault(option.name)
        return list(seen)


VERL = Convention(
    framework="verl",
    version="0.9.1",
    own_names=_frozen(
        {
            "grpo": "grpo",
            "dr": "grpo with norm_adv_by_std_in_grpo=False",
            "rloo": 'rloo (rloo_vectorized is rloo with singletons="skip")',
            "opo": "opo",
            "grpo_passk": "grpo_passk",
            "gpg": "gpg",
            "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline",
            "remax": "remax",
            # per token in verl, so in the adapter: the reward-to-go at algorithm.gamma
            "reinforce": "reinforce_plus_plus",
            "gdpo": "gdpo",
        }
    ),
    options=_frozen(
        {
            "grpo": {"eps": 1e-6, "std_correction": 1},
            "grpo_passk": {"eps": 1e-6, "std_correction": 1},
            "gpg": {"f_norm": 1.0},
            "reinforce_plus_plus_baseline": {
                "std_correction": 1,
                "var_eps": 1e-8,
                "var_floor": 0.0,
            },
            "reinforce": {"std_correction": 1, "var_eps": 1e-8, "var_floor": 0.0},
            "gdpo": {"eps": 1e-6, "std_correction": 1, "var_eps": 1e-8, "std_eps": 0.0},
        }
    ),
    singletons="raw",
    singletons_refused=frozenset({"grpo_passk"}),  # "Pass@k requires at least 2 samples"
    # verl's remax and reinforce_plus_plus return the reward-to-go, not the advantages
    returns=_frozen({"remax": "reward", "reinforce": "reward"}),
    extra_names=_frozen({"reward_budget": "budget"}),
    whole_batch="verl calls the estimator once on the whole batch, in its TaskRunner",
    components=(
        "non_tensor_batch[key] for each key of algorithm.gdpo_reward_keys (the keys of the "
        "dict compute_score returns, verl's reward_extra_info), weighted by "
        "algorithm.gdpo_reward_weights, as verl's own gdpo"
    ),
)

OPENRLHF = Convention(
    framework="openrlhf",
    version="0.11.2",
    own_names=_frozen(
        {
            "grpo": "group_norm",
            "dr": "dr_grpo",
            "rloo": "rloo",
            "reinforce": "reinforce",
            "reinforce_baseline": "reinforce_baseline",
        }
    ),
    options=_frozen(
        {
            "grpo": {"eps": 1e-9, "std_correction": 1},
            "reinforce": {"std_correction": 0, "var_eps": 0.0, "var_floor": 1e-8},
            "reinforce_baseline": {"std_correction": 0, "var_eps": 0.0, "var_floor": 1e-8},
        }
    ),
    # train_ppo_ray asserts n_samples_per_prompt > 1 for these (its own names); reinforce
    # runs with groups of one.
    singletons_refused=frozenset({"grpo", "dr", "rloo", "reinforce_baseline"}),
    # OpenRLHF whitens the advantages after the returns: these are of the reward before.
    returns=_frozen({"reinforce": "reward", "reinforce_baseline": "dr"}),
    extra_names=_frozen({"reward_budget": "budget"}),
    whole_batch="every experience of the step, concatenated, in the PPOTrainer actor",
)

TRL = Convention(
    framework="trl",
    version="1.13, 1.16",
    own_names=_frozen(
        {
            "grpo": 'GRPOTrainer scale_rewards="group"',
            "dr": 'GRPOTrainer scale_rewards="none"',
            "rloo": "RLOOTrainer",
            "grpo_batch_std": 'GRPOTrainer scale_rewards="batch"',
            "rloo_normalized": "RLOOTrainer normalize_advantages=True",
            "gdpo": 'GRPOTrainer multi_objective_aggregation="normalize_then_sum"',
        }
    ),
    options=_frozen(
        {
            "grpo": {"eps": 1e-4, "std_correction": 1},
            "grpo_batch_std": {"eps": 1e-4, "std_correction": 1},
            "rloo_normalized": {"eps": 1e-4, "std_correction": 1},
            "gdpo": {"eps": 1e-4, "std_correction": 1, "var_eps": 0.0, "std_eps": 1e-4},
        }
    ),
    prefix="",
    kappa_every=0,
    whole_batch="the rewards gathered from every process (TRL's _calculate_rewards)",
    components="the rewards of each reward function (reward_funcs), weighted by reward_weights",
)

# tunix/rl/algo_core.py (0.1.7): grpo is (r - mean) / (std(ddof=1) + 1e-6), rloo and drgrpo
# have no constant; all on exact values (no tie tolerance). GRPOConfig refuses groups of one.
TUNIX = Convention(
    framework="tunix",
    version="0.1.7",
    own_names=_frozen({"grpo": "grpo", "dr": "drgrpo", "rloo": "rloo"}),
    options=_frozen({"grpo": {"eps": 1e-6, "std_correction": 1}}),
    extra_names=_frozen({"reward_budget": "budget"}),
    whole_batch=(
        "GRPOLearner calls the estimator once per step on the merged micro-batches; the "
        "agentic learner calls it one group at a time (batch statistics are then the group's)"
    ),
)

CONVENTIONS: Mapping[str, Convention] = _frozen(
    {c.framework: c for c in (VERL, OPENRLHF, TRL, TUNIX)}
)


def get_convention(framework: str) -> Convention:
    """The :class:`Convention` row of ``framework`` (``"verl"``, ``"trl"``, ``"openrlhf"``,
    ``"tunix"``)."""
    if framework not in CONVENTIONS:
        raise ValueError(f"framework: expected one of {sorted(CONVENTIONS)}, got {framework!r}")
    return CONVENTIONS[framework]
