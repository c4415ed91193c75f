"""The registry: every estimator by name, from three places: the built-ins, the
:func:`register_estimator` calls of user code, and the ``advbudget.estimators``
entry-point group of installed packages (loaded on first lookup, so they also exist
inside Ray workers).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, overload

from ._spec import Estimator, EstimatorSpec, estimator_spec
from .baseline import SPECS as _BASELINE
from .batch import SPECS as _BATCH
from .group import SPECS as _GROUP
from .passk import SPECS as _PASSK
from .stateful import SPECS as _STATEFUL
from .turns import SPECS as _TURNS

ENTRY_POINT_GROUP = "advbudget.estimators"

BUILTINS: tuple[EstimatorSpec, ...] = (
    *_GROUP,
    *_PASSK,
    *_BATCH,
    *_BASELINE,
    *_STATEFUL,
    *_TURNS,
)
"""The built-in estimators, in the order the docs and ``estimator_names()`` list them."""

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
    group, gaps to the group minimum, counts, the skipped groups, group reductions and
    the building blocks the built-ins use: ``deviation()``, ``std()``, ``kept_rows()``,
    ``safe()``, ``with_raw_singletons()``) and its options, and returns advantages as
    rows; its keyword parameters with defaults become its options (in verl
    ``+algorithm.advbudget.<option>``, in OpenRLHF ``--advbudget.<option>``, in TRL
    ``advantage_options``). Pass an :class:`EstimatorSpec` (from :func:`estimator_spec`)
    to check options, declare extra inputs, aliases, a skip rule or ``raw_singletons``.
    Use it directly, as a decorator, or through an ``advbudget.estimators`` entry point
    (``NAME = "pkg.module:estimator"``) so that every process finds it.

    Registering a name (or an alias) that is taken raises unless ``replace=True``; a
    replaced alias then names the new estimator only.

    Examples:
        >>> import numpy as np
        >>> from advbudget import register_estimator, compute_advantages
        >>> from advbudget import unregister_estimator
        >>> @register_estimator("doubled_dr", replace=True)
        ... def doubled_dr(grouped, *, factor=2.0):
        ...     return factor * grouped.deviation() * grouped.kept_rows()
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
    _add(estimator_spec(estimator, name=name), replace=replace)
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
        return estimator_spec(estimator)
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
