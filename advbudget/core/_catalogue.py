"""The estimator catalogue: every estimator once, as data, for the core, the adapters,
the CLI and the docs.

An :class:`EstimatorSpec` holds an estimator's function, names, typed options (defaults
and checks), the extra per-rollout inputs it needs, its skip rule and where it comes
from. Everything else reads it: :func:`~advbudget.compute_advantages` checks options and
inputs against it, each adapter exposes every entry by name (``advbudget_NAME`` in verl
and OpenRLHF, ``NAME`` in TRL), and ``docs/estimators.md`` is generated from it.

Estimators come from three places: the built-ins below, :func:`register_estimator` in
user code, and the ``advbudget.estimators`` entry-point group of installed packages
(loaded on first lookup, so they also exist inside Ray workers).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal, overload

from .. import checks
from . import _estimators
from ._arrays import Array

Estimator = Callable[..., Array]
"""``estimator(grouped: GroupedRewards, **options, **inputs) -> advantages as rows``."""

SkipRule = Literal["ties", "never"]

ENTRY_POINT_GROUP = "advbudget.estimators"


def _any(name: str, value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Option:
    """An estimator option: its name, default, a check that converts or raises, a line."""

    name: str
    default: Any
    check: Callable[[str, Any], Any] = _any
    doc: str = ""

    def value(self, given: Any) -> Any:
        return self.check(self.name, given)


@dataclass(frozen=True)
class Input:
    """An extra per-rollout array an estimator needs beside the rewards, ``[N]``."""

    name: str
    doc: str
    required: bool = True


@dataclass(frozen=True)
class EstimatorSpec:
    """Everything about one estimator that code outside its function needs.

    Attributes:
        name: the core name (``"budget"``); frameworks use ``advbudget_<name>``.
        fn: ``fn(grouped, **options, **inputs) -> advantages as rows``.
        formula: the advantage of a rollout, in one line (docs).
        reference: where it comes from (paper, framework).
        aliases: other names for it (the names frameworks and papers use).
        options: its options; anything else given to it is an error.
        inputs: extra per-rollout arrays (``response_lengths=``), laid out as rows before
            ``fn`` sees them.
        skips: ``"ties"``: a group with no reward gap (or of one) gets advantage 0 and
            ``valid`` False; ``"never"``: only groups without any reward are skipped (for
            estimators whose advantage is not 0 on a constant group: batch whitening, a
            given baseline).
        raw_singletons: whether ``singletons="raw"`` (verl's baseline 0 for a group of
            one) means anything for it.
        batch_statistics: what it computes over the whole batch rather than per group
            ("" for none); adapters call the core on the whole (gathered) batch.
        slope_of: for :func:`advbudget.theory.implied_slope`: the estimator whose slope
            this one has up to a positive factor set by the batch (whitening), or None.
    """

    name: str
    fn: Estimator
    formula: str = ""
    reference: str = ""
    aliases: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    inputs: tuple[Input, ...] = ()
    skips: SkipRule = "ties"
    raw_singletons: bool = True
    batch_statistics: str = ""
    slope_of: str | None = None

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def resolve_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The options for ``fn``: defaults, overridden by ``given``, each checked."""
        known = {o.name for o in self.options}
        unknown = sorted(set(given) - known)
        if unknown:
            takes = ", ".join(sorted(known | {i.name for i in self.inputs})) or "no options"
            raise TypeError(
                f"{unknown[0]}: not an option of estimator {self.name!r} (it takes {takes})"
            )
        return {o.name: o.value(given.get(o.name, o.default)) for o in self.options}

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def spec_from_function(name: str, fn: Estimator) -> EstimatorSpec:
    """A spec for a plain estimator function: its keyword parameters with defaults are
    its options (not checked here: the function checks them), its docstring's first line
    the formula."""
    options: list[Option] = []
    try:
        parameters = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):  # builtins and some callables have no signature
        parameters = []
    for p in parameters:
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is not p.empty:
            options.append(Option(p.name, p.default))
    doc = (inspect.getdoc(fn) or "").strip().splitlines()
    return EstimatorSpec(
        name=name,
        fn=fn,
        formula=doc[0] if doc else "",
        reference=getattr(fn, "__module__", "") or "",
        options=tuple(options),
    )


# -- the built-in estimators ----------------------------------------------------------

_TIE_NOTE = "a group with no reward gap, or of one"


def _eps(default: float) -> Option:
    return Option("eps", default, checks.nonnegative_finite, "added to the std")


def _std_correction(name: str, value: Any) -> int:
    if isinstance(value, bool) or value not in (0, 1):
        raise ValueError(f"{name}: expected 0 (biased std) or 1 (unbiased), got {value!r}")
    return int(value)


_STD_CORRECTION = Option(
    "std_correction", 1, _std_correction, "1: unbiased std (torch's default); 0: biased"
)

_RESPONSE_LENGTHS = Input(
    "response_lengths", "the token count of each rollout's response (verl's response_mask sum)"
)
_TOKEN_WEIGHTS = Input(
    "response_lengths",
    "the token count of each rollout's response, its weight in the batch statistics "
    "(without it every rollout weighs 1)",
    required=False,
)
_WHITEN_NOTE = (
    "the mean and variance of the advantages over every response token of the whole batch "
    "(each rollout weighted by response_lengths, or 1 without them)"
)


def _whitening(*, correction: int, var_eps: float, var_floor: float) -> tuple[Option, ...]:
    return (
        Option(
            "std_correction",
            correction,
            _std_correction,
            "1: unbiased variance over tokens (verl's masked_whiten); 0: biased (OpenRLHF)",
        ),
        Option("var_eps", var_eps, checks.nonnegative_finite, "added to the variance"),
        Option("var_floor", var_floor, checks.nonnegative_finite, "the variance's lower clamp"),
        Option(
            "std_norm",
            True,
            checks.boolean,
            "False: only the batch mean is subtracted (OpenRLHF's no_std_norm)",
        ),
    )


BUILTINS: tuple[EstimatorSpec, ...] = (
    EstimatorSpec(
        name="budget",
        fn=_estimators.budget,
        formula="B·(r−min)/Σ(r−min) − B/G",
        reference="Reward budgeting, arXiv 2611.05942",
        aliases=("reward_budget",),
        options=(Option("budget", 1.0, checks.positive_finite, "the total budget B"),),
        raw_singletons=False,
    ),
    EstimatorSpec(
        name="grpo",
        fn=_estimators.group_normalized,
        formula="(r − mean) / (std + eps)",
        reference="GRPO, arXiv 2402.03300",
        aliases=("group_norm",),
        options=(_eps(1e-6), _STD_CORRECTION),
    ),
    EstimatorSpec(
        name="dr",
        fn=_estimators.dr,
        formula="r − mean",
        reference="Dr. GRPO, arXiv 2503.20783",
        aliases=("dr_grpo",),
    ),
    EstimatorSpec(
        name="rloo",
        fn=_estimators.rloo,
        formula="r − mean of the others",
        reference="RLOO, arXiv 2402.14740",
    ),
    EstimatorSpec(
        name="opo",
        fn=_estimators.opo,
        formula="r − Σ len·r / Σ len (the length-weighted group mean)",
        reference="OPO, arXiv 2505.23585 (verl's opo)",
        inputs=(_RESPONSE_LENGTHS,),
    ),
    EstimatorSpec(
        name="grpo_passk",
        fn=_estimators.grpo_passk,
        formula=(
            "(r_max − r_second) / (std + eps) for a group's best rollout if it is the only "
            "best, 0 for every other rollout"
        ),
        reference="Pass@k training, arXiv 2503.19595 (verl's grpo_passk)",
        options=(
            Option(
                "norm_adv_by_std",
                True,
                checks.boolean,
                "False: r_max − r_second, not divided by the std (verl's norm_adv_by_std_in_grpo)",
            ),
            _eps(1e-6),
            _STD_CORRECTION,
        ),
        raw_singletons=False,  # verl raises on a group of one: there is no second best
    ),
    EstimatorSpec(
        name="gpg",
        fn=_estimators.gpg,
        formula="α · (r − mean) / f_norm, α = N / (rollouts of the batch with r ≠ 0)",
        reference="GPG, arXiv 2504.02546 (verl's gpg)",
        options=(Option("f_norm", 1.0, checks.positive_finite, "divides the advantage"),),
        batch_statistics=(
            "α = N / max(1, number of nonzero rewards), N the rollouts with a reward, over "
            "the whole batch"
        ),
        slope_of="dr",
    ),
    EstimatorSpec(
        name="reinforce_plus_plus_baseline",
        fn=_estimators.reinforce_baseline,
        formula="whiten(r − mean): the group-centred reward whitened over the batch's tokens",
        reference="REINFORCE++-baseline, arXiv 2501.03262 (verl's reinforce_plus_plus_baseline)",
        options=_whitening(correction=1, var_eps=1e-8, var_floor=0.0),
        inputs=(_TOKEN_WEIGHTS,),
        skips="never",
        batch_statistics=_WHITEN_NOTE,
        slope_of="dr",
    ),
    EstimatorSpec(
        name="remax",
        fn=_estimators.remax,
        formula="r − b, b the reward of the prompt's greedy rollout",
        reference="ReMax, arXiv 2310.10505 (verl's remax)",
        inputs=(
            Input(
                "reward_baselines",
                "the reward of each rollout's greedy (baseline) response (verl's reward_baselines)",
            ),
        ),
        skips="never",
        raw_singletons=False,  # no group statistics: any grouping gives the same numbers
    ),
    EstimatorSpec(
        name="reinforce_baseline",
        fn=_estimators.reinforce_baseline,
        formula="whiten(r − mean): the group-centred reward whitened over the batch's tokens",
        reference="REINFORCE++-baseline, arXiv 2501.03262 (OpenRLHF's reinforce_baseline)",
        options=_whitening(correction=0, var_eps=0.0, var_floor=1e-8),
        inputs=(_TOKEN_WEIGHTS,),
        skips="never",
        batch_statistics=_WHITEN_NOTE,
        slope_of="dr",
    ),
    EstimatorSpec(
        name="reinforce",
        fn=_estimators.reinforce,
        formula="whiten(r): the reward, no baseline, whitened over the batch's tokens",
        reference="REINFORCE++, arXiv 2501.03262 (OpenRLHF's reinforce, γ = 1, no KL)",
        options=_whitening(correction=0, var_eps=0.0, var_floor=1e-8),
        inputs=(_TOKEN_WEIGHTS,),
        skips="never",
        raw_singletons=False,  # no group statistics
        batch_statistics=_WHITEN_NOTE,
    ),
    EstimatorSpec(
        name="grpo_batch_std",
        fn=_estimators.grpo_batch_std,
        formula="(r − mean) / (std of every reward of the batch + eps)",
        reference=(
            'Lite PPO, arXiv 2508.08221 (TRL\'s GRPOTrainer scale_rewards="batch"; '
            '"group" is grpo, "none" is dr)'
        ),
        options=(_eps(1e-4), _STD_CORRECTION),
        raw_singletons=False,
        batch_statistics="the std of the raw rewards of the whole batch (unbiased by default)",
        slope_of="dr",
    ),
    EstimatorSpec(
        name="rloo_normalized",
        fn=_estimators.rloo_normalized,
        formula="(A − mean A) / (std A + eps), A rloo's advantage, over the batch",
        reference="RLOO, arXiv 2402.14740 (TRL's RLOOTrainer normalize_advantages=True)",
        options=(_eps(1e-4), _STD_CORRECTION),
        raw_singletons=False,
        batch_statistics=(
            "the mean and std of rloo's advantages over every rollout of the batch in a "
            "group of two or more (one per rollout, not token-weighted)"
        ),
        slope_of="rloo",
    ),
)


# -- the registry -----------------------------------------------------------------------

_SPECS: dict[str, EstimatorSpec] = {}
_ALIASES: dict[str, str] = {}
_LISTENERS: list[Callable[[EstimatorSpec], None]] = []
_PLUGIN_ERRORS: dict[str, str] = {}
_plugins_loaded = False


def _add(spec: EstimatorSpec, *, replace: bool) -> EstimatorSpec:
    for name in spec.names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name: expected a non-empty string, got {name!r}")
        owner = _ALIASES.get(name, name if name in _SPECS else None)
        if owner is not None and not replace and _SPECS[owner].fn is not spec.fn:
            raise ValueError(
                f"name: {name!r} is already registered"
                + (f" (an alias of {owner!r})" if owner != name else "")
                + "; pass replace=True to replace it"
            )
    for name in spec.names:
        # A replaced name leaves the estimator it belonged to (as its name or an alias).
        owner = _ALIASES.pop(name, None)
        if owner is not None and owner != spec.name and owner in _SPECS:
            old = _SPECS[owner]
            _SPECS[owner] = dataclasses.replace(
                old, aliases=tuple(a for a in old.aliases if a != name)
            )
        if name in _SPECS and name != spec.name:
            _remove(name)
    _SPECS[spec.name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = spec.name
    for listener in list(_LISTENERS):
        listener(spec)
    return spec


def _remove(name: str) -> None:
    spec = _SPECS.pop(name)
    for alias in spec.aliases:
        _ALIASES.pop(alias, None)


for _spec in BUILTINS:
    _add(_spec, replace=False)


@overload
def register_estimator(
    name: str, estimator: None = None, *, replace: bool = False
) -> Callable[[Estimator], Estimator]: ...
@overload
def register_estimator(
    name: str | EstimatorSpec,
    estimator: Estimator | EstimatorSpec,
    *,
    replace: bool = False,
) -> Estimator | EstimatorSpec: ...
@overload
def register_estimator(name: EstimatorSpec, *, replace: bool = False) -> EstimatorSpec: ...


def register_estimator(
    name: str | EstimatorSpec,
    estimator: Estimator | EstimatorSpec | None = None,
    *,
    replace: bool = False,
) -> Any:
    """Register an estimator for :func:`compute_advantages`, the adapters and the CLI.

    An estimator function receives the batch as :class:`GroupedRewards` (rewards by
    group, their gaps to the group minimum, counts, the skipped groups and group
    reductions) and its options, and returns advantages as rows; its keyword parameters
    with defaults become its options (in verl ``+algorithm.advbudget.<option>``, in
    OpenRLHF ``--advbudget.<option>``, in TRL ``advantage_options``). Pass an
    :class:`EstimatorSpec` to declare checked options, extra inputs, aliases or a skip
    rule. Use it directly, as a decorator, or through an ``advbudget.estimators`` entry
    point (``NAME = "pkg.module:estimator"``) so that every process finds it.

    Registering a name (or an alias) that is taken raises unless ``replace=True``; a
    replaced alias then names the new estimator only.

    Examples:
        >>> import numpy as np
        >>> from advbudget import register_estimator, compute_advantages
        >>> from advbudget import unregister_estimator
        >>> @register_estimator("doubled_dr", replace=True)
        ... def doubled_dr(grouped, *, factor=2.0):
        ...     mean = grouped.sum(grouped.gap) / grouped.count
        ...     keep = grouped.xp.astype(grouped.kept(), grouped.gap.dtype)
        ...     return factor * (grouped.gap - grouped.expand(mean)) * grouped.expand(keep)
        >>> rewards = np.array([1.0, 0.0, 1.0, 1.0])
        >>> compute_advantages(rewards, "doubled_dr", group_size=2).advantages
        array([ 1., -1.,  0.,  0.])
        >>> compute_advantages(rewards, "doubled_dr", group_size=2, factor=4.0).advantages
        array([ 2., -2.,  0.,  0.])
        >>> unregister_estimator("doubled_dr")
    """
    if isinstance(name, EstimatorSpec):
        if estimator is not None:
            raise TypeError("estimator: expected nothing beside an EstimatorSpec, got one")
        _add(name, replace=replace)
        return name
    if estimator is None:
        return lambda fn: register_estimator(name, fn, replace=replace)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name: expected a non-empty string, got {name!r}")
    if isinstance(estimator, EstimatorSpec):
        _add(dataclasses.replace(estimator, name=name), replace=replace)
        return estimator
    if not callable(estimator):
        raise TypeError(f"estimator: expected a callable, got {type(estimator).__name__}")
    _add(spec_from_function(name, estimator), replace=replace)
    return estimator


def unregister_estimator(name: str) -> None:
    """Remove the estimator registered as ``name`` (with its aliases)."""
    resolved = _ALIASES.get(name, name)
    if resolved not in _SPECS:
        raise ValueError(f"name: expected a registered estimator, got {name!r}")
    _remove(resolved)


def on_register(listener: Callable[[EstimatorSpec], None]) -> None:
    """Call ``listener(spec)`` for every estimator registered from now on (the adapters
    use it to expose estimators registered after they were imported)."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)


def load_plugins(*, force: bool = False) -> None:
    """Register the estimators of the ``advbudget.estimators`` entry points (once).

    A plugin that fails to load is reported when its name is looked up, not here: one
    broken package must not cost every other estimator.
    """
    global _plugins_loaded
    if _plugins_loaded and not force:
        return
    _plugins_loaded = True
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _SPECS or point.name in _ALIASES:
            continue
        try:
            obj = point.load()
            register_estimator(point.name, obj)
        except Exception as error:
            _PLUGIN_ERRORS[point.name] = (
                f"the {ENTRY_POINT_GROUP} entry point {point.name} = {point.value} "
                f"failed to load: {type(error).__name__}: {error}"
            )
            print(f"advbudget: {_PLUGIN_ERRORS[point.name]}", file=sys.stderr)


def get_spec(name: str) -> EstimatorSpec:
    """The :class:`EstimatorSpec` registered as ``name`` or one of its aliases."""
    if not isinstance(name, str):
        raise TypeError(f"estimator: expected a name, got {type(name).__name__}")
    resolved = _ALIASES.get(name, name)
    if resolved not in _SPECS:
        load_plugins()
        resolved = _ALIASES.get(name, name)
    if resolved not in _SPECS:
        if name in _PLUGIN_ERRORS:
            raise ValueError(f"estimator: {name!r} is not available: {_PLUGIN_ERRORS[name]}")
        known = ", ".join(repr(n) for n in all_names())
        raise ValueError(f"estimator: expected one of {known} or a callable, got {name!r}")
    return _SPECS[resolved]


def as_spec(estimator: str | EstimatorSpec | Estimator) -> EstimatorSpec:
    """The spec of a name (or alias), a spec, or a plain estimator function."""
    if isinstance(estimator, EstimatorSpec):
        return estimator
    if isinstance(estimator, str):
        return get_spec(estimator)
    if callable(estimator):
        return spec_from_function(getattr(estimator, "__name__", "custom"), estimator)
    raise TypeError(
        "estimator: expected a name, an EstimatorSpec or a callable, "
        f"got {type(estimator).__name__}"
    )


def get_estimator(name: str) -> Estimator:
    """The estimator function registered under ``name`` (or one of its aliases).

    Examples:
        >>> from advbudget import get_estimator
        >>> get_estimator("reward_budget").__name__
        'budget'
    """
    return get_spec(name).fn


def estimator_names() -> list[str]:
    """The registered estimator names (aliases not included), built-ins first.

    Examples:
        >>> from advbudget import estimator_names
        >>> estimator_names()[:4]
        ['budget', 'grpo', 'dr', 'rloo']
    """
    load_plugins()
    return list(_SPECS)


def all_names() -> list[str]:
    """Every name an estimator answers to: names, then aliases."""
    load_plugins()
    return [*_SPECS, *_ALIASES]


def estimator_specs() -> list[EstimatorSpec]:
    """Every registered :class:`EstimatorSpec`, built-ins first."""
    load_plugins()
    return list(_SPECS.values())


@dataclass
class _Snapshot:
    specs: dict[str, EstimatorSpec] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    listeners: list[Callable[[EstimatorSpec], None]] = field(default_factory=list)
    plugins_loaded: bool = False
    plugin_errors: dict[str, str] = field(default_factory=dict)


def snapshot() -> _Snapshot:
    """The registry's state, for :func:`restore` (tests keep registrations from leaking)."""
    return _Snapshot(
        dict(_SPECS), dict(_ALIASES), list(_LISTENERS), _plugins_loaded, dict(_PLUGIN_ERRORS)
    )


def restore(state: _Snapshot) -> None:
    global _plugins_loaded
    _plugins_loaded = state.plugins_loaded
    _PLUGIN_ERRORS.clear()
    _PLUGIN_ERRORS.update(state.plugin_errors)
    _SPECS.clear()
    _SPECS.update(state.specs)
    _ALIASES.clear()
    _ALIASES.update(state.aliases)
    _LISTENERS[:] = state.listeners
