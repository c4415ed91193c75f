"""tunix's advbudget options: keyword arguments, read once into one
:class:`~advbudget.adapters._options.AdapterOptions`.

They reach the adapter three ways, each through :func:`read_options`: :func:`configure`
(the estimators' options and ``solved_reward``), the environment variable
:data:`OPTIONS_ENV` read at import (the CLI's route, into :func:`configure`), and
``AdvBudgetGRPOLearner``'s ``skipped_groups=`` / ``kappa_every=``, read with the configured
ones when the learner is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advbudget.core.estimators.stateful import KL_RHO

from .._options import CORE_OPTIONS, STALENESS_OPTIONS, UNSET, AdapterOptions
from ._convention import TUNIX

#: The environment variable read at import for the options (``budget=0.5,nan_policy=omit``):
#: the route for tunix's CLI, where no Python runs before training.
OPTIONS_ENV = "ADVBUDGET_TUNIX_OPTIONS"

RESAMPLE_REFUSED = (
    "tunix 0.1.7 has no dynamic sampling (DAPOConfig.dynamic_sampling is a TODO); "
    "use 'drop' or 'keep'"
)

# Read beside configure's: the learner's keywords, and resample's cap (tunix refuses
# resample: read and checked as in every adapter, never used).
_OTHER_OPTIONS = ("skipped_groups", "kappa_every", "max_generation_batches", *STALENESS_OPTIONS)


def known_options() -> list[str]:
    """Every option :func:`configure` takes: each catalogue option, the core's tie
    tolerance and ``nan_policy``, ``solved_reward`` (metrics) and ``group_weight``."""
    return [*TUNIX.option_names(), *CORE_OPTIONS, "solved_reward", "group_weight"]


def key_of(name: str) -> str:
    """tunix's key of our option ``name``: the keyword itself."""
    return name


def read_options(
    given: Mapping[str, Any],
    *,
    staleness_refused: str | None = None,
    kl_rho_refused: str | None = None,
) -> AdapterOptions:
    """The options of keyword arguments ``given`` (defaults from tunix's convention row); an
    unknown or bad one raises a one-line ValueError naming it. ``staleness_refused``: why
    the learner reading them refuses ``max_staleness`` and ``stale_rollouts``
    (:data:`STALENESS_REFUSED` for ``AdvBudgetGRPOLearner``; None: the agentic learner,
    which reads each trajectory's policy version); ``kl_rho_refused``: why it refuses
    ``rho="kl"`` (:data:`AGENTIC_KL_RHO_REFUSED` for the agentic learner).

    Examples:
        >>> options = read_options({"budget": 0.5, "skipped_groups": "Drop"})
        >>> dict(options.estimator_options), options.skipped_groups, options.kappa_every
        ({'budget': 0.5}, 'drop', 10)
        >>> read_options({"skipped_groups": "resample"})
        Traceback (most recent call last):
        ...
        ValueError: skipped_groups: 'resample' is not available here: tunix 0.1.7 has no ...
    """
    _refuse_unknown(given, [*known_options(), *_OTHER_OPTIONS])
    return AdapterOptions.parse(
        lambda name: given.get(name, UNSET),
        TUNIX,
        key=key_of,
        resample_refused=RESAMPLE_REFUSED,
        kl_rho_refused=kl_rho_refused,
        staleness_refused=staleness_refused,
    )


#: Why ``AdvBudgetGRPOLearner`` refuses the staleness options: tunix's ``GRPOLearner``
#: stamps no policy version on its rollouts (it scores them right after generating them);
#: its agentic learner does, and ``AdvBudgetAgenticGRPOLearner`` reads them.
STALENESS_REFUSED = (
    "tunix's GRPOLearner stamps no policy version on its rollouts; "
    "AdvBudgetAgenticGRPOLearner reads the versions tunix's agentic learner stamps"
)


#: Why ``AdvBudgetAgenticGRPOLearner`` refuses ``rho="kl"``: tunix's agentic learner
#: scores a group from its trajectories' rewards alone, without their tokens at hand.
AGENTIC_KL_RHO_REFUSED = (
    "tunix's agentic learner hands the estimator a group's rewards without its tokens; "
    "AdvBudgetGRPOLearner measures it; give spo a constant rho in [0, 1] (default 0.875)"
)


def staleness_given(max_staleness: int | None, stale_rollouts: str) -> dict[str, Any]:
    """A learner's staleness keywords as options: those it was given (None and ``keep``,
    the defaults, are not)."""
    given: dict[str, Any] = {}
    if max_staleness is not None:
        given["max_staleness"] = max_staleness
    if stale_rollouts != "keep":
        given["stale_rollouts"] = stale_rollouts
    return given


def _refuse_unknown(given: Mapping[str, Any], allowed: list[str]) -> None:
    for key, value in given.items():
        if key not in allowed:
            raise ValueError(
                f"{key}: not an advbudget option in tunix (expected one of "
                f"{', '.join(allowed)}), got {key}={value!r}"
            )


@dataclass(frozen=True)
class _Configured:
    options: AdapterOptions
    given: Mapping[str, Any]  # each as checked: what configure() returns


_CONFIGURED = _Configured(read_options({}), {})


def configure(**options: Any) -> dict[str, Any]:
    """Set the options of every advbudget estimator in tunix (replacing earlier ones);
    returns them.

    Options: any catalogue option (``budget=0.5``, ``eps=``, ``std_correction=``, a
    plugin's own; each estimator reads the ones it takes), ``tie_rtol``/``tie_atol`` (the
    core's tie tolerance), ``nan_policy`` (``raise``/``omit``), ``solved_reward`` (metrics:
    the reward at which a rollout counts as solved; None leaves the solved/unsolved keys
    out), ``group_weight`` (a difficulty weight on the advantages: ``"grpo_lead"``,
    ``"dqw"``, ``{"name": ..., options}`` or a callable ``fn(p_hat)``; see
    :func:`advbudget.compute_advantages`). Each value is checked now. ``configure()``
    resets them all. tunix's CLI reads them from ``ADVBUDGET_TUNIX_OPTIONS`` instead (see
    :data:`OPTIONS_ENV`; a weight there by name: ``group_weight=dqw``).

    Examples:
        >>> from advbudget.adapters.tunix import configure
        >>> configure(budget=0.5)
        {'budget': 0.5}
        >>> configure(budjet=0.5)
        Traceback (most recent call last):
        ...
        ValueError: budjet: not an advbudget option in tunix (expected one of budget, ...=0.5
        >>> configure()
        {}
    """
    _refuse_unknown(options, known_options())
    record = read_options(options)
    checked = {key: _checked(record, key, value) for key, value in options.items()}
    global _CONFIGURED
    _CONFIGURED = _Configured(record, checked)
    return dict(checked)


def _checked(record: AdapterOptions, key: str, value: Any) -> Any:
    """Option ``key`` as :func:`configure` returns it: the checked value."""
    if key == "solved_reward":
        return record.solved_reward
    if key == "group_weight":
        return value  # as given (a name, a mapping, a callable): the record holds it parsed
    if key == "rho" and record.kl_rho:
        return KL_RHO
    return record.estimator_options[key]


def options() -> dict[str, Any]:
    """The options set by :func:`configure` (or the environment), a copy."""
    return dict(_CONFIGURED.given)


def configured() -> AdapterOptions:
    """The record :func:`configure` (or the environment) made: what the estimators and
    :func:`~advbudget.adapters.tunix.metric_fn` read."""
    return _CONFIGURED.options


def _parse_env(text: str) -> dict[str, Any]:
    """``"budget=0.5,nan_policy=omit"`` -> options (numbers and true/false converted)."""
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{OPTIONS_ENV}: expected key=value items, got {item!r}")
        value: Any = raw.strip()
        if value.lower() in ("true", "false"):
            value = value.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(value)
                    break
                except ValueError:
                    pass
        out[key.strip()] = value
    return out


def configure_from_environment() -> dict[str, Any]:
    """:func:`configure` from ``ADVBUDGET_TUNIX_OPTIONS`` when it is set (else nothing)."""
    text = os.environ.get(OPTIONS_ENV)
    return configure(**_parse_env(text)) if text else options()
