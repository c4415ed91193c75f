"""TRL's advbudget options: ``AdvBudgetGRPOTrainer``'s keyword arguments, read once into one
:class:`~advbudget.adapters._options.AdapterOptions`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from advbudget.metrics import check_solved_reward

from .._options import UNSET, AdapterOptions
from ._convention import TRL

# Keyword arguments whose None is "not given": the estimator's default tolerance.
_NONE_IS_UNSET = ("tie_rtol", "tie_atol")


def key_of(name: str) -> str:
    """TRL's name of our option ``name``: the ``AdvBudgetGRPOTrainer`` keyword argument
    (``skipped_groups``, ``nan_policy``, ...), or, for an estimator's own option such as
    ``budget``, its key in ``advantage_options``: the same name either way."""
    return name


#: Why the staleness options are refused in TRL: ``GRPOTrainer`` computes the advantages
#: right after it generates, with the weights that generated (``trl/experimental/async_grpo``
#: is another trainer, which the adapter does not cover).
STALENESS_REFUSED = (
    "TRL's GRPOTrainer scores its rollouts right after generating them with the current "
    "weights (none is stale); its experimental async GRPO trainer is not wired to the "
    "adapter"
)


def read_options(kwargs: Mapping[str, Any]) -> AdapterOptions:
    """The options of ``AdvBudgetGRPOTrainer``'s keyword arguments ``kwargs`` (an option
    absent, or a tolerance None, takes its default from TRL's convention row); an option is
    a keyword argument or a key of ``advantage_options``. A bad value raises a one-line
    ValueError naming it; ``skip_empty_groups=True`` is ``skipped_groups="drop"``.

    Examples:
        >>> options = read_options({"advantage_options": {"budget": 0.5}, "kappa_every": 3})
        >>> dict(options.estimator_options), options.kappa_every, options.skipped_groups
        ({'budget': 0.5}, 3, 'keep')
        >>> read_options({"skip_empty_groups": True}).skipped_groups
        'drop'
        >>> read_options({"solved_reward": "1.0"})
        Traceback (most recent call last):
        ...
        ValueError: solved_reward: expected a finite number or None, got '1.0'
    """
    estimator = kwargs.get("advantage_options") or {}

    def read(name: str) -> Any:
        value = kwargs.get(name, UNSET)
        if value is UNSET or (value is None and name in _NONE_IS_UNSET):
            value = estimator.get(name, UNSET)
        if name == "solved_reward" and value is not UNSET:
            # A keyword argument is a Python value: a string is refused, not parsed as a
            # command line's would be.
            check_solved_reward(value, key_of(name))
        return value

    options = AdapterOptions.parse(
        read, TRL, key=key_of, off="None", staleness_refused=STALENESS_REFUSED
    )
    alias = kwargs.get("skip_empty_groups")
    if alias is not None and not isinstance(alias, bool):
        raise TypeError(f"skip_empty_groups: expected a bool, got {alias!r}")
    return replace(options, skipped_groups="drop") if alias else options
