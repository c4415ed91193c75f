"""tunix advantage estimators: every estimator of the advbudget catalogue, by name.

tunix calls a registered estimator as ``fn(rewards=<numpy float64 [B*G]>,
num_generations=G)`` outside jit, each prompt's G rollouts adjacent, and puts what it
returns through ``jax.device_put`` as the ``[B*G]`` advantages (``grpo_learner.py``); the
agentic learner calls it once per group (``rewards`` of shape ``[G]``). Each function here
runs the core once on the numpy rewards, in their precision (float64 for tunix's float64,
as its numpy estimators), returns the advantages and publishes the whole
:class:`~advbudget.AdvantageResult` (:func:`~advbudget.adapters._features.publish`) for
what runs after it in tunix's step: :func:`metric_fn`, ``AdvBudgetGRPOLearner``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from advbudget.core import (
    AdvantageResult,
    EstimatorSpec,
    compute_advantages,
    get_spec,
    on_register,
)

from .._features import (
    Step,
    lent_keywords,
    lent_versions,
    publish,
    step_metrics,
    take_published,
)
from ._convention import TUNIX
from ._hooks import advantage_estimator_names
from ._options import configured

TunixEstimator = Callable[..., np.ndarray]


def estimator_names() -> list[str]:
    """Every tunix name of our estimators (the whole catalogue, plugins included)."""
    return list(TUNIX.names())


def core_settings(name: str) -> tuple[str, dict[str, Any]]:
    """The core estimator and its :func:`compute_advantages` keywords for tunix name
    ``name``: tunix's conventions for its mirrors, then the configured options."""
    core = TUNIX.core_name(name)
    TUNIX.check_rewards(core, name)
    spec = get_spec(core)
    return core, TUNIX.settings(core, configured().compute_keywords(spec))


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


def result(name: str, rewards: Any, num_generations: int) -> AdvantageResult:
    """The core's :class:`~advbudget.AdvantageResult` (numpy) of tunix estimator ``name``
    on ``rewards``: what the estimator returns the advantages of, and the metrics read."""
    array = _check_call(name, rewards, num_generations)
    core, settings = core_settings(name)
    spec = get_spec(core)
    if spec.required_inputs:
        needs = ", ".join(spec.required_inputs)
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
    memory = lent_keywords(
        spec,
        array.shape[0],
        "tunix hands an estimator the rewards alone: AdvBudgetGRPOLearner (or "
        "AdvBudgetDAPOLearner) lends it each row's prompt",
    )
    versions = lent_versions(array.shape[0])  # AdvBudgetAgenticGRPOLearner's, if any
    return compute_advantages(
        array, core, group_size=int(num_generations), **settings, **memory, **versions
    )


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
    scored = result(name, rewards, num_generations)
    return np.asarray(scored.advantages), np.asarray(scored.valid)


def estimator_function(name: str) -> TunixEstimator:
    """The function tunix calls for our estimator ``name`` (one per name, made once)."""
    TUNIX.core_name(name)  # an unknown name fails here
    if name not in _FUNCTIONS:
        _FUNCTIONS[name] = _make(name)
    return _FUNCTIONS[name]


_FUNCTIONS: dict[str, TunixEstimator] = {}


def _make(name: str) -> TunixEstimator:
    def estimator(rewards: Any, num_generations: int) -> np.ndarray:
        scored = result(name, rewards, num_generations)
        publish(scored)  # computed once: what runs after us in tunix's step takes it
        return _shaped(name, np.asarray(scored.advantages), rewards)

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


def metric_fn(
    prompts: Any, completions: Any, rewards: Any, advantages: Any, **kwargs: Any
) -> dict[str, tuple[float, Callable[..., Any]]]:
    """``GRPOLearner(metric_fns=[metric_fn])``: the ``advbudget/*`` keys of the other
    adapters (:func:`advbudget.adapters._features.step_metrics`) into tunix's metrics
    logger, for the advbudget estimator that scored this batch (nothing for another)."""
    scored = take_published(int(np.size(rewards)))
    if scored is None:
        return {}  # not scored by one of ours (tunix's own estimator)
    metrics = step_metrics(Step(scored, configured(), TUNIX.metric_prefix))
    return {key: (value, np.mean) for key, value in metrics.items()}
