"""tunix advantage estimators: every estimator of the advbudget catalogue, by name.

tunix calls a registered estimator as ``fn(rewards=<numpy float64 [B*G]>,
num_generations=G)`` outside jit, each prompt's G rollouts adjacent, and puts what it
returns through ``jax.device_put`` as the ``[B*G]`` advantages (``grpo_learner.py``); the
agentic learner calls it once per group (``rewards`` of shape ``[G]``). Each function here
runs the core on jax arrays, jitted with the group size static, in the rewards' precision
(float64 for tunix's float64, as its numpy estimators), and returns numpy.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from advbudget.core import (
    AdvantageResult,
    EstimatorSpec,
    compute_advantages,
    estimator_specs,
    get_convention,
    get_spec,
    on_register,
)
from advbudget.metrics import advantage_metric_dict

from .._options import parse_solved_reward
from ._hooks import advantage_estimator_names

TunixEstimator = Callable[..., np.ndarray]

TUNIX = get_convention("tunix")

#: The environment variable read at import for the options (``budget=0.5,nan_policy=omit``):
#: the route for tunix's CLI, where no Python runs before training.
OPTIONS_ENV = "ADVBUDGET_TUNIX_OPTIONS"

# Options of the core call (beside each estimator's own) and of the metrics.
_CORE_OPTIONS = ("tie_rtol", "tie_atol", "nan_policy")
_METRIC_OPTIONS = ("solved_reward",)


@dataclass(frozen=True)
class _Options:
    values: Mapping[str, Any]


_OPTIONS = _Options({})


def known_options() -> list[str]:
    """Every option :func:`configure` takes: each catalogue option, the core's tie
    tolerance and ``nan_policy``, and ``solved_reward`` (metrics)."""
    return [*TUNIX.option_names(), *_CORE_OPTIONS, *_METRIC_OPTIONS]


def configure(**options: Any) -> dict[str, Any]:
    """Set the options of every advbudget estimator in tunix (replacing earlier ones);
    returns them.

    Options: any catalogue option (``budget=0.5``, ``eps=``, ``std_correction=``, a
    plugin's own; each estimator reads the ones it takes), ``tie_rtol``/``tie_atol`` (the
    core's tie tolerance), ``nan_policy`` (``raise``/``omit``), ``solved_reward`` (metrics:
    the reward at which a rollout counts as solved; None leaves the solved/unsolved keys
    out). Each value is checked now. ``configure()`` resets them all. tunix's CLI reads them
    from ``ADVBUDGET_TUNIX_OPTIONS`` instead (see :data:`OPTIONS_ENV`).

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
    checked = {key: _check_option(key, value) for key, value in options.items()}
    global _OPTIONS
    _OPTIONS = _Options(checked)
    _jitted.cache_clear()
    return dict(checked)


def options() -> dict[str, Any]:
    """The options set by :func:`configure` (or the environment), a copy."""
    return dict(_OPTIONS.values)


def _check_option(key: str, value: Any) -> Any:
    if key not in known_options():
        raise ValueError(
            f"{key}: not an advbudget option in tunix (expected one of "
            f"{', '.join(known_options())}), got {key}={value!r}"
        )
    if key == "solved_reward":
        return parse_solved_reward(value, key, "None")
    if key in _CORE_OPTIONS:
        # the core checks these; one tiny call does it now rather than mid-training
        compute_advantages(np.zeros(2), "dr", group_size=2, **{key: value})
        return value
    for spec in estimator_specs():
        option = spec.option(key)
        if option is not None:
            value = option.value(value)
    return value


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


def estimator_names() -> list[str]:
    """Every tunix name of our estimators (the whole catalogue, plugins included)."""
    return list(TUNIX.names())


def core_settings(name: str) -> tuple[str, dict[str, Any]]:
    """The core estimator and its :func:`compute_advantages` keywords for tunix name
    ``name``: tunix's conventions for its mirrors, then the configured options."""
    core = TUNIX.core_name(name)
    TUNIX.check_rewards(core, name)
    spec = get_spec(core)
    given = _OPTIONS.values
    overrides = {
        key: given[key] for key in (*(o.name for o in spec.options), *_CORE_OPTIONS) if key in given
    }
    return core, TUNIX.settings(core, overrides)


@functools.lru_cache(maxsize=256)
def _jitted(core: str, settings: tuple[tuple[str, Any], ...]) -> Callable[..., Any]:
    import jax

    def advantages_and_valid(rewards: Any, group_size: int) -> tuple[Any, Any]:
        result = compute_advantages(rewards, core, group_size=group_size, **dict(settings))
        return result.advantages, result.valid

    return jax.jit(advantages_and_valid, static_argnames=("group_size",))


def _check_call(name: str, rewards: Any, num_generations: Any) -> np.ndarray:
    """``rewards`` flattened: tunix's own estimators take any shape they can
    ``reshape(-1, num_generations)`` (``[B*G]``, or ``[1, B*G]``), so ours do too."""
    if isinstance(num_generations, bool) or not isinstance(num_generations, int | np.integer):
        raise TypeError(f"num_generations: {name} expected an int, got {num_generations!r}")
    array = np.asarray(rewards)
    if array.ndim == 0 or array.size == 0:
        raise ValueError(
            f"rewards: {name} expected a non-empty array of B*G rewards ([B*G] or "
            f"[1, B*G]), got shape {array.shape}"
        )
    if num_generations < 1 or array.size % num_generations:
        raise ValueError(
            f"num_generations: {name} expected a divisor of the {array.size} rewards "
            f"(B prompts x G rollouts, each prompt's adjacent), got {num_generations}"
        )
    return array.reshape(-1)


# tunix's rloo returns its advantages flattened; its grpo and drgrpo (and ours) in the
# rewards' shape
_FLAT_OUTPUT = frozenset({"rloo"})


def _shaped(name: str, advantages: np.ndarray, rewards: Any) -> np.ndarray:
    core = TUNIX.core_name(name)
    if TUNIX.is_mirror(core) and core in _FLAT_OUTPUT:
        return advantages
    shaped: np.ndarray = advantages.reshape(np.shape(rewards))
    return shaped


class _Last(threading.local):
    """The last call's rewards and valid mask, per thread: the learner reads it right
    after tunix's call (same thread, also when rollouts are prefetched on another)."""

    rewards: Any = None
    valid: np.ndarray | None = None
    name: str = ""
    group_size: int = 0
    scored: AdvantageResult | None = None


LAST = _Last()


def last_result() -> AdvantageResult | None:
    """The :func:`result` of this thread's last call of one of our estimators (made once,
    for the metrics, the ledger and κ_eff); None before any."""
    if not LAST.name or LAST.rewards is None:
        return None
    if LAST.scored is None:
        LAST.scored = result(LAST.name, LAST.rewards, LAST.group_size)
    return LAST.scored


def advantages_and_valid(
    name: str, rewards: Any, num_generations: int
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages ``[N]`` and the valid mask ``[N]`` (False: a skipped group's rollout, or
    a NaN reward under ``nan_policy="omit"``) of tunix estimator ``name``, as numpy.

    Examples:
        >>> import numpy as np
        >>> rewards = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0])
        >>> advantages, valid = advantages_and_valid("reward_budget", rewards, 4)
        >>> advantages.round(4).tolist(), valid.tolist()
        ([0.0, 0.0, 0.0, 0.0, 0.25, -0.25, -0.25, 0.25], [False, False, False, False, True, True, True, True])
    """  # noqa: E501
    import jax.numpy as jnp

    array = _check_call(name, rewards, num_generations)
    core, settings = core_settings(name)
    spec = get_spec(core)
    if spec.inputs and any(i.required for i in spec.inputs):
        needs = ", ".join(i.name for i in spec.inputs if i.required)
        raise ValueError(
            f"estimator: {name} needs {needs}, which tunix does not pass to an estimator "
            "(it passes rewards and num_generations only)"
        )
    if spec.batch_statistics and array.shape[0] == num_generations:
        warnings.warn(
            f"{name}: called on one group of {num_generations} rollouts (tunix's agentic "
            f"learner does this), so its batch statistics ({spec.batch_statistics}) are "
            "the group's own",
            UserWarning,
            stacklevel=3,
        )
    if np.isfinite(array).all():
        import jax

        fn = _jitted(core, tuple(sorted(settings.items())))
        # In the rewards' precision, as tunix's numpy estimators: float64 (what tunix
        # passes) in a float64 trace, whatever jax's default.
        wide = not (np.issubdtype(array.dtype, np.floating) and array.dtype.itemsize < 8)
        with jax.enable_x64(True) if wide else contextlib.nullcontext():
            advantages, valid = fn(jnp.asarray(array), group_size=int(num_generations))
            out, mask = np.asarray(advantages), np.asarray(valid)
    else:  # eagerly: the core's one-line error (raise), or the NaN rows left out (omit)
        scored = compute_advantages(array, core, group_size=int(num_generations), **settings)
        out, mask = np.asarray(scored.advantages), np.asarray(scored.valid)
    LAST.rewards, LAST.valid, LAST.name = rewards, mask, name
    LAST.group_size, LAST.scored = int(num_generations), None
    return out, mask


def result(name: str, rewards: Any, num_generations: int) -> AdvantageResult:
    """The core's :class:`~advbudget.AdvantageResult` (numpy, eager) of tunix estimator
    ``name``: what the metrics read. The same numbers as the jitted estimator."""
    array = _check_call(name, rewards, num_generations)
    core, settings = core_settings(name)
    return compute_advantages(array, core, group_size=int(num_generations), **settings)


def estimator_function(name: str) -> TunixEstimator:
    """The function tunix calls for our estimator ``name`` (one per name, made once)."""
    TUNIX.core_name(name)  # an unknown name fails here
    if name not in _FUNCTIONS:
        _FUNCTIONS[name] = _make(name)
    return _FUNCTIONS[name]


_FUNCTIONS: dict[str, TunixEstimator] = {}


def _make(name: str) -> TunixEstimator:
    def estimator(rewards: Any, num_generations: int) -> np.ndarray:
        return _shaped(name, advantages_and_valid(name, rewards, num_generations)[0], rewards)

    spec = get_spec(TUNIX.core_name(name))
    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantages"
    estimator.__doc__ = (
        f"tunix estimator ``{name}``: {spec.formula} ({spec.reference}).\n\n"
        "Args:\n"
        "    rewards: ``[B*G]`` (or ``[1, B*G]``) numpy rewards, each prompt's G rollouts\n"
        "        adjacent.\n"
        "    num_generations: G.\n\n"
        "Returns:\n"
        "    numpy advantages in the rewards' shape (tunix's rloo: flattened, as tunix's);\n"
        "    options: advbudget.adapters.tunix.configure.\n"
    )
    return estimator


def register_estimators() -> list[str]:
    """Register every catalogue estimator with tunix's advantage registry; returns the
    names. Idempotent (tunix overwrites a name, with a warning we silence for ours).
    Estimators registered with advbudget later in this process follow."""
    names = estimator_names()
    for name in names:
        _register_with_tunix(name)
    on_register(_on_new_estimator)
    return names


def _register_with_tunix(name: str) -> None:
    from tunix.rl import function_registry

    fn = estimator_function(name)
    if name in registered_names():
        existing = function_registry.get_advantage_estimator(name)
        if getattr(existing, "__qualname__", None) != fn.__qualname__:
            raise ValueError(
                f"estimator: {name!r} is already registered in tunix by "
                f"{getattr(existing, '__module__', '?')}; advbudget will not replace it"
            )
    # ours from an earlier import (pytest's importlib mode) is replaced (tunix warns; the
    # package's log filter silences that for our names)
    function_registry.register_advantage_estimator(name)(fn)


def registered_names() -> list[str]:
    """Every name in tunix's advantage registry (tunix 0.1.7 has no list function)."""
    return advantage_estimator_names()


def _on_new_estimator(spec: EstimatorSpec) -> None:
    for alias in spec.names:
        _FUNCTIONS.pop(TUNIX.name_of(alias), None)
        _register_with_tunix(TUNIX.name_of(alias))
    _jitted.cache_clear()


def metric_fn(
    prompts: Any, completions: Any, rewards: Any, advantages: Any, **kwargs: Any
) -> dict[str, tuple[float, Callable[..., Any]]]:
    """``GRPOLearner(metric_fns=[metric_fn])``: the ``advbudget/*`` keys of the other
    adapters (:func:`advbudget.metrics.advantage_metric_dict`) into tunix's metrics
    logger, for the advbudget estimator that scored this batch (nothing for another)."""
    scored = last_result() if LAST.rewards is rewards else None
    if scored is None:
        return {}  # not scored by one of ours (tunix's own estimator)
    solved = _OPTIONS.values.get("solved_reward", 1.0)
    metrics = advantage_metric_dict(scored, TUNIX.metric_prefix, solved_reward=solved)
    return {key: (value, np.mean) for key, value in metrics.items() if not math.isnan(value)}
