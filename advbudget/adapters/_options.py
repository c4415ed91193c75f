"""Adapter options read from a framework's own config or command line."""

from __future__ import annotations

import contextlib
import enum
import json
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from advbudget.adapters import Convention
from advbudget.core import EstimatorSpec
from advbudget.core._staleness import STALE_RULES
from advbudget.core._weights import GroupWeight, parse_group_weight
from advbudget.core.estimators.stateful import KL_RHO, is_kl_rho
from advbudget.metrics import DEFAULT_SOLVED_REWARD, check_solved_reward

# How a command line or a hydra string turns the solved/unsolved split off.
OFF_WORDS = ("none", "null", "off")


def parse_solved_reward(value: Any, name: str, off: str) -> float | None:
    """A ``solved_reward`` option as a framework hands it over: a number, a numeric
    string, or one of :data:`OFF_WORDS` (None: the split off). Anything else raises a
    one-line ValueError naming the option ``name`` and the framework's word ``off``.

    Examples:
        >>> parse_solved_reward("0.5", "--x", "none"), parse_solved_reward("null", "--x", "none")
        (0.5, None)
        >>> parse_solved_reward("high", "algorithm.x", "null")
        Traceback (most recent call last):
        ...
        ValueError: algorithm.x: expected a finite number or null (off), got 'high'
    """
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in OFF_WORDS:
            return None
        with contextlib.suppress(ValueError):  # not a number: refused below
            value = float(text)
    try:
        return check_solved_reward(value, name)
    except ValueError:
        raise ValueError(
            f"{name}: expected a finite number or {off} (off), got {value!r}"
        ) from None


def parse_group_weight_option(value: Any, name: str) -> GroupWeight | None:
    """A ``group_weight`` option as a framework hands it over: a weight name, a mapping
    ``{"name": ..., options}`` (a config's dict, or a command line's JSON object), a
    callable (Python APIs), or one of :data:`OFF_WORDS` (None: no weight). A bad value
    raises a one-line error naming the option ``name``.

    Examples:
        >>> parse_group_weight_option("grpo_lead", "--x").describe()
        'grpo_lead'
        >>> parse_group_weight_option('{"name": "dqw", "temperature": 1}', "--x").describe()
        'dqw(temperature=1)'
        >>> print(parse_group_weight_option("none", "--x"))
        None
        >>> parse_group_weight_option("lead", "algorithm.advbudget.group_weight")
        Traceback (most recent call last):
        ...
        ValueError: algorithm.advbudget.group_weight: expected one of 'grpo_lead', 'dqw', ...
    """
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in OFF_WORDS:
            return None
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{name}: expected a weight name or a JSON object "
                    f'{{"name": ..., options}}, got {value!r} ({error.msg})'
                ) from None
        else:
            value = text
    try:
        return parse_group_weight(value)
    except (TypeError, ValueError) as error:
        message = str(error).replace("group_weight", name, 1)
        raise type(error)(message) from None


#: What an adapter does with the rollouts that take no part in the update (a skipped
#: group's, or a NaN reward's under ``nan_policy="omit"``): ``keep`` them with advantage 0
#: (the framework's own behaviour), ``drop`` them from the loss and its normaliser, or
#: ``resample``: generate again until the step holds enough kept groups (DAPO's dynamic
#: sampling).
SKIPPED_GROUPS = ("keep", "drop", "resample")


def parse_skipped_groups(value: Any, name: str, *, resample_refused: str | None = None) -> str:
    """A ``skipped_groups`` option: one of :data:`SKIPPED_GROUPS`, case and spaces aside.
    ``resample_refused`` is the reason a framework cannot resample (then ``resample`` is
    refused with it). Errors are one line naming the option ``name``.

    Examples:
        >>> parse_skipped_groups(" Drop", "--advbudget.skipped_groups")
        'drop'
        >>> parse_skipped_groups("skip", "skipped_groups")
        Traceback (most recent call last):
        ...
        ValueError: skipped_groups: expected one of keep, drop, resample, got 'skip'
    """
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in SKIPPED_GROUPS:
        raise ValueError(f"{name}: expected one of {', '.join(SKIPPED_GROUPS)}, got {value!r}")
    if text == "resample" and resample_refused is not None:
        raise ValueError(f"{name}: 'resample' is not available here: {resample_refused}")
    return text


def parse_max_generation_batches(value: Any, name: str) -> int:
    """How many generation rounds ``resample`` may take per step: an int >= 1 (a command
    line's or hydra's numeric string too).

    Examples:
        >>> parse_max_generation_batches("4", "--advbudget.max_generation_batches")
        4
        >>> parse_max_generation_batches(0, "max_generation_batches")
        Traceback (most recent call last):
        ...
        ValueError: max_generation_batches: expected an int >= 1, got 0
    """
    return parse_int(value, name, low=1)


def parse_max_staleness(value: Any, name: str, off: str) -> int | None:
    """A ``max_staleness`` option: an int >= 0 (a command line's numeric string too) or
    one of :data:`OFF_WORDS` (None: nothing is stale).

    Examples:
        >>> parse_max_staleness("1", "--advbudget.max_staleness", "none")
        1
        >>> print(parse_max_staleness("none", "--advbudget.max_staleness", "none"))
        None
        >>> parse_max_staleness(-1, "max_staleness", "None")
        Traceback (most recent call last):
        ...
        ValueError: max_staleness: expected an int >= 0 or None (off), got -1
    """
    if isinstance(value, str) and value.strip().lower() in OFF_WORDS:
        return None
    try:
        return parse_int(value, name, low=0)
    except ValueError:
        raise ValueError(f"{name}: expected an int >= 0 or {off} (off), got {value!r}") from None


def parse_stale_rollouts(value: Any, name: str) -> str:
    """A ``stale_rollouts`` option: one of the core's rules (``keep``, ``baseline_only``,
    ``drop``, ``drop_group``), case and spaces aside.

    Examples:
        >>> parse_stale_rollouts(" Baseline_Only", "--advbudget.stale_rollouts")
        'baseline_only'
        >>> parse_stale_rollouts("withhold", "stale_rollouts")
        Traceback (most recent call last):
        ...
        ValueError: stale_rollouts: expected one of keep, baseline_only, drop, drop_group, ...
    """
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in STALE_RULES:
        raise ValueError(f"{name}: expected one of {', '.join(STALE_RULES)}, got {value!r}")
    return text


class _Unset(enum.Enum):
    UNSET = "unset"


#: What a reader of :meth:`AdapterOptions.parse` returns for an option the run did not set
#: (None is a value: ``solved_reward=None`` turns the split off).
UNSET = _Unset.UNSET

#: ``max_generation_batches`` when unset (the cap of verl's DAPO recipe), every framework.
DEFAULT_MAX_GENERATION_BATCHES = 10

#: The core's options besides each estimator's own, read by every adapter.
CORE_OPTIONS = ("tie_rtol", "tie_atol", "nan_policy")

#: The options of stale rollouts, one setting in every framework; honoured where the adapter
#: knows which policy version sampled each rollout (else refused with the reason).
STALENESS_OPTIONS = ("max_staleness", "stale_rollouts")


@dataclass(frozen=True)
class AdapterOptions:
    """What a run asked of an adapter, read once from the framework's own config and checked.

    Attributes:
        framework: ``"verl"``, ``"trl"``, ``"openrlhf"`` or ``"tunix"``.
        estimator_options: the estimator options given (a catalogue option such as
            ``budget``, or one of :data:`CORE_OPTIONS`), each checked; the framework's
            conventions are added by :meth:`~advbudget.core.Convention.settings`.
        solved_reward: the reward at which a rollout counts as solved (None: the
            solved/unsolved split and the prompt ledger off).
        skipped_groups: ``keep``, ``drop`` or ``resample`` (:data:`SKIPPED_GROUPS`).
        max_generation_batches: ``resample``'s cap on generation rounds a step.
        kappa_every: κ_eff every this many steps (0: off).
        group_weight: a difficulty weight on the estimator's advantages (None: none);
            its solved share uses ``solved_reward`` (1.0 when the split is off).
        kl_rho: ``rho="kl"``: ``spo`` forgets at SPO's KL-adaptive rate, which the
            adapter measures from the policy's log-probs each step.
        max_staleness: a rollout sampled more than this many policy versions before the
            update is stale (None: none is); only where the framework stamps versions.
        stale_rollouts: what stale rollouts do (the core's ``stale_rollouts``: ``keep``,
            ``baseline_only``, ``drop``, ``drop_group``).
    """

    framework: str
    estimator_options: Mapping[str, Any] = field(default_factory=dict)
    solved_reward: float | None = DEFAULT_SOLVED_REWARD
    skipped_groups: str = "keep"
    max_generation_batches: int = DEFAULT_MAX_GENERATION_BATCHES
    kappa_every: int = 0
    group_weight: GroupWeight | None = None
    kl_rho: bool = False
    max_staleness: int | None = None
    stale_rollouts: str = "keep"

    @property
    def prompt_ledger(self) -> bool:
        """Whether the per-prompt ledger runs (it needs the solved/unsolved split)."""
        return self.solved_reward is not None

    @classmethod
    def parse(
        cls,
        read: Callable[[str], Any],
        convention: Convention,
        *,
        key: Callable[[str], str] = str,
        off: str = "None",
        resample_refused: str | None = None,
        kl_rho_refused: str | None = None,
        staleness_refused: str | None = None,
    ) -> AdapterOptions:
        """The options of one run: ``read(name)`` is the framework's value of option
        ``name`` (:data:`UNSET` when unset), ``key(name)`` the framework's own key for it (named by
        a refusal), ``off`` the framework's word for None. Defaults come from the
        framework's ``convention`` row. A bad value raises a one-line ValueError naming
        the framework's key. ``resample_refused`` and ``kl_rho_refused`` are the reasons a
        framework cannot resample or measure ``rho="kl"`` (then that value is refused).

        Examples:
            >>> from advbudget.adapters import get_convention
            >>> given = {"budget": 0.5, "skipped_groups": "Drop", "kappa_every": "0"}
            >>> read = lambda name: given.get(name, UNSET)
            >>> options = AdapterOptions.parse(read, get_convention("verl"),
            ...                                key=lambda name: f"algorithm.advbudget.{name}")
            >>> dict(options.estimator_options), options.skipped_groups, options.kappa_every
            ({'budget': 0.5}, 'drop', 0)
            >>> AdapterOptions.parse(lambda name: -1 if name == "kappa_every" else UNSET,
            ...                      get_convention("trl"))
            Traceback (most recent call last):
            ...
            ValueError: kappa_every: expected an int >= 0, got -1
        """
        estimator_options = {}
        kl_rho = False
        for name in (*convention.option_names(), *CORE_OPTIONS):
            value = read(name)
            if is_kl_rho(name, value):
                if kl_rho_refused is not None:
                    raise ValueError(
                        f"{key(name)}: {KL_RHO!r} is not available here: {kl_rho_refused}"
                    )
                kl_rho = True
            elif name == "rho" and isinstance(value, str):
                raise ValueError(
                    f"{key(name)}: expected a number in [0, 1] or {KL_RHO!r} (SPO's "
                    f"KL-adaptive forgetting), got {value!r}"
                )
            elif value is not UNSET:
                estimator_options[name] = check_estimator_option(name, value, key(name))
        solved = read("solved_reward")
        max_rounds = read("max_generation_batches")
        every = read("kappa_every")
        skipped = read("skipped_groups")
        weight = read("group_weight")
        max_staleness, stale_rollouts = _staleness(read, key, off, staleness_refused)
        return cls(
            framework=convention.framework,
            estimator_options=MappingProxyType(estimator_options),
            solved_reward=(
                DEFAULT_SOLVED_REWARD
                if solved is UNSET
                else parse_solved_reward(solved, key("solved_reward"), off)
            ),
            skipped_groups=(
                "keep"
                if skipped is UNSET
                else parse_skipped_groups(
                    skipped, key("skipped_groups"), resample_refused=resample_refused
                )
            ),
            max_generation_batches=(
                DEFAULT_MAX_GENERATION_BATCHES
                if max_rounds is UNSET
                else parse_max_generation_batches(max_rounds, key("max_generation_batches"))
            ),
            kappa_every=(
                convention.kappa_every
                if every is UNSET
                else parse_int(every, key("kappa_every"), low=0)
            ),
            group_weight=(
                None if weight is UNSET else parse_group_weight_option(weight, key("group_weight"))
            ),
            kl_rho=kl_rho,
            max_staleness=max_staleness,
            stale_rollouts=stale_rollouts,
        )

    def weight_keywords(self) -> dict[str, Any]:
        """The :func:`~advbudget.compute_advantages` keywords of the group weight: none
        without one; else the weight and the ``solved_reward`` of its solved share."""
        if self.group_weight is None:
            return {}
        bar = DEFAULT_SOLVED_REWARD if self.solved_reward is None else self.solved_reward
        return {"group_weight": self.group_weight, "solved_reward": bar}

    def staleness_keywords(self, policy_versions: Any, current_version: int) -> dict[str, Any]:
        """The :func:`~advbudget.compute_advantages` keywords of the step's policy versions
        (one per rollout, as the framework stamped them) and the rule of this run."""
        return {
            "policy_versions": policy_versions,
            "current_version": current_version,
            "max_staleness": self.max_staleness,
            "stale_rollouts": self.stale_rollouts,
        }

    def compute_keywords(self, spec: EstimatorSpec) -> dict[str, Any]:
        """The :func:`~advbudget.compute_advantages` keywords this run gives estimator
        ``spec``: the options given that it takes, the core's (:data:`CORE_OPTIONS`), and
        the group weight (:meth:`weight_keywords`). The framework's conventions come on
        top of them (:meth:`~advbudget.core.Convention.settings`)."""
        takes = {o.name for o in spec.options} | set(CORE_OPTIONS)
        given = {k: v for k, v in self.estimator_options.items() if k in takes}
        return {**given, **self.weight_keywords()}


def _staleness(
    read: Callable[[str], Any], key: Callable[[str], str], off: str, refused: str | None
) -> tuple[int | None, str]:
    """``max_staleness`` and ``stale_rollouts`` of one run (see :meth:`AdapterOptions.parse`):
    a rule other than ``keep`` needs ``max_staleness`` (without it nothing is stale)."""
    limit, rule = read("max_staleness"), read("stale_rollouts")
    for name, value in (("max_staleness", limit), ("stale_rollouts", rule)):
        if value is not UNSET and refused is not None:
            raise ValueError(f"{key(name)}: not available here: {refused}")
    max_staleness = (
        None if limit is UNSET else parse_max_staleness(limit, key("max_staleness"), off)
    )
    stale_rollouts = "keep" if rule is UNSET else parse_stale_rollouts(rule, key("stale_rollouts"))
    if stale_rollouts != "keep" and max_staleness is None:
        raise ValueError(
            f"{key('stale_rollouts')}: {stale_rollouts!r} acts on stale rollouts, and none is "
            f"stale without {key('max_staleness')} (give the versions a rollout may lag)"
        )
    return max_staleness, stale_rollouts


def parse_int(value: Any, name: str, *, low: int) -> int:
    """An int >= ``low`` as a framework hands it over (a command line's numeric string too).

    Examples:
        >>> parse_int("+3", "--advbudget.kappa_every", low=0)
        3
        >>> parse_int(2.5, "kappa_every", low=0)
        Traceback (most recent call last):
        ...
        ValueError: kappa_every: expected an int >= 0, got 2.5
    """
    number = value
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        number = int(value.strip())
    if isinstance(number, bool) or not isinstance(number, numbers.Integral) or number < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
    return int(number)  # a numpy integer too


def check_estimator_option(name: str, value: Any, key: str) -> Any:
    """``value`` of estimator option ``name`` (a catalogue option or one of
    :data:`CORE_OPTIONS`), checked and converted now rather than mid-training; a bad
    value raises a one-line ValueError naming the framework's ``key``."""
    import numpy as np

    from advbudget.core import compute_advantages, estimator_specs

    try:
        if name in CORE_OPTIONS:  # the core checks these: one tiny call does it now
            compute_advantages(np.zeros(2), "dr", group_size=2, **{name: value})
            return value
        for spec in estimator_specs():
            option = spec.option(name)
            if option is not None:
                value = option.value(value)
        return value
    except ValueError as error:
        message = str(error)
        if message.startswith(f"{name}:"):
            message = message[len(name) + 1 :].strip()
        raise ValueError(f"{key}: {message}") from None
