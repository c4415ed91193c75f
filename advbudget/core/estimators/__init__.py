"""The estimator catalogue: every estimator once, its function and its spec side by side.

One module per family holds the functions and, above each, its declaration (names,
formula, reference, option rules; the defaults are read from the signature):
``group`` (each rollout against its group), ``passk`` (credit for a group's success),
``batch`` (statistics over the whole batch), ``baseline`` (a baseline from outside the
group). ``_spec`` is what code outside a function knows about it (:class:`EstimatorSpec`),
``_registry`` finds estimators by name (built-ins, :func:`register_estimator`, entry
points). :func:`~advbudget.compute_advantages` checks options and inputs against the spec,
each adapter exposes every entry by name, and ``docs/estimators.md`` is generated from it.
"""

from ._registry import (
    BUILTINS,
    ENTRY_POINT_GROUP,
    all_names,
    as_spec,
    estimator_names,
    estimator_specs,
    get_estimator,
    get_spec,
    load_plugins,
    on_register,
    register_estimator,
    restore,
    snapshot,
    unregister_estimator,
)
from ._spec import Estimator, EstimatorSpec, Input, Option, Rule, SkipRule, estimator_spec

__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUP",
    "Estimator",
    "EstimatorSpec",
    "Input",
    "Option",
    "Rule",
    "SkipRule",
    "all_names",
    "as_spec",
    "estimator_names",
    "estimator_spec",
    "estimator_specs",
    "get_estimator",
    "get_spec",
    "load_plugins",
    "on_register",
    "register_estimator",
    "restore",
    "snapshot",
    "unregister_estimator",
]
