"""SkyRL's advbudget options: the mapping ``trainer.algorithm.advbudget`` of the run's config,
read once into one :class:`~advbudget.adapters._options.AdapterOptions`.

SkyRL's config is typed: an unknown key is refused (``from_cli_overrides``). The adapter's
entry point parses the command line with :class:`AdvBudgetAlgorithmConfig`'s field
``advbudget`` (a mapping), so ``trainer.algorithm.advbudget.budget=0.5`` is a key like any
other; a plain ``AlgorithmConfig`` (a direct call of an estimator) has the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._options import CORE_OPTIONS, STALENESS_OPTIONS, UNSET, AdapterOptions
from ._convention import SKYRL

#: Where the options sit in SkyRL's config.
KEY = "trainer.algorithm.advbudget"

#: Why the staleness options are refused in SkyRL: its fully async trainer
#: (``skyrl/train/fully_async_trainer.py``) is not the path the adapter runs; the
#: trainer it patches scores rollouts of the current weights.
STALENESS_REFUSED = (
    "the SkyRL trainer the adapter patches scores rollouts sampled with the current "
    "weights (none is stale); its fully async trainer is not wired to the adapter yet"
)

#: SkyRL's own option: with step-wise trajectories, each step's advantage times its row
#: weight, 1 / the steps of its trajectory (:func:`read_row_weights`).
ROW_WEIGHTS = "row_weights"

#: SkyRL's policy losses that are a sum over tokens of terms each linear in its advantage
#: with a factor set by the advantage's sign only (``ppo_utils.py``: regular and dual_clip
#: l.555-587, sapo l.590, gspo l.663, cispo l.732, rollout_is l.824, dppo l.866,
#: importance_sampling l.1095): scaling a row's advantages by w > 0 scales its terms by w,
#: so the loss weighs each row by its row weight exactly.
ROW_WEIGHTED_LOSSES = (
    "regular",
    "dual_clip",
    "sapo",
    "gspo",
    "cispo",
    "rollout_is",
    "dppo",
    "importance_sampling",
)

_OTHER_OPTIONS = (
    "solved_reward",
    "group_weight",
    "skipped_groups",
    "max_generation_batches",
    "kappa_every",
    *STALENESS_OPTIONS,
    ROW_WEIGHTS,
)


def known_options() -> list[str]:
    """Every option under ``trainer.algorithm.advbudget``: each catalogue option, the
    core's tie tolerance and ``nan_policy``, and the trainer features'."""
    return [*SKYRL.option_names(), *CORE_OPTIONS, *_OTHER_OPTIONS]


def key_of(name: str) -> str:
    """SkyRL's key of our option ``name``: ``trainer.algorithm.advbudget.<name>``."""
    return f"{KEY}.{name}"


def given_options(config: Any) -> Mapping[str, Any]:
    """The ``advbudget`` mapping of SkyRL's algorithm config ``config`` ({} without one:
    a plain ``AlgorithmConfig``, or None)."""
    given = getattr(config, "advbudget", None)
    if given is None and isinstance(config, Mapping):
        given = config.get("advbudget")
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise ValueError(f"{KEY}: expected a mapping of option: value, got {given!r}")
    return given


def read_options(config: Any) -> AdapterOptions:
    """The options of SkyRL's algorithm config ``config`` (or of the ``advbudget``
    mapping itself); defaults from SkyRL's convention row. An unknown or bad option raises a
    one-line ValueError naming its key.

    Examples:
        >>> options = read_options({"advbudget": {"budget": 0.5, "skipped_groups": "Drop"}})
        >>> dict(options.estimator_options), options.skipped_groups, options.kappa_every
        ({'budget': 0.5}, 'drop', 10)
        >>> read_options({"advbudget": {"budjet": 0.5}})
        Traceback (most recent call last):
        ...
        ValueError: trainer.algorithm.advbudget.budjet: not an advbudget option (expected ...
    """
    given = given_options(config)
    allowed = known_options()
    for name, value in given.items():
        if name not in allowed:
            raise ValueError(
                f"{key_of(name)}: not an advbudget option (expected one of "
                f"{', '.join(allowed)}), got {value!r}"
            )
    return AdapterOptions.parse(
        lambda name: given.get(name, UNSET),
        SKYRL,
        key=key_of,
        off="null",
        staleness_refused=STALENESS_REFUSED,
    )


def read_row_weights(config: Any) -> bool:
    """``trainer.algorithm.advbudget.row_weights`` of SkyRL's algorithm config (default
    false): a boolean, or its spelling ``true``/``false``; anything else raises one line
    naming the key.

    Examples:
        >>> read_row_weights({"advbudget": {"row_weights": "True"}}), read_row_weights({})
        (True, False)
    """
    value = given_options(config).get(ROW_WEIGHTS, False)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ValueError(f"{key_of(ROW_WEIGHTS)}: expected true or false, got {value!r}")
    return value
