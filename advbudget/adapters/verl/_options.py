"""verl's advbudget options: ``+algorithm.advbudget.<name>``, read once into one
:class:`~advbudget.adapters._options.AdapterOptions`."""

from __future__ import annotations

from typing import Any

from .._options import UNSET, AdapterOptions
from ._convention import VERL


def option(config: Any, key: str, default: Any) -> Any:
    """``config.<key>`` (a dotted path) from a DictConfig, a dataclass, a dict or None;
    ``default`` where a part is missing or None."""
    value: Any = config
    for part in key.split("."):
        if value is None:
            return default
        if isinstance(value, dict) or hasattr(value, "get"):
            try:
                value = value.get(part, None)
            except Exception:  # a dataclass with an unrelated ``get``
                value = getattr(value, part, None)
        else:
            value = getattr(value, part, None)
    return default if value is None else value


def _given(node: Any, name: str) -> Any:
    """``node.<name>`` as set (None included), :data:`UNSET` where it is not set."""
    if node is None:
        return UNSET
    if isinstance(node, dict) or hasattr(node, "keys"):  # a dict or a DictConfig
        return node.get(name, UNSET)
    return getattr(node, name, UNSET)


def key_of(name: str) -> str:
    """verl's key of our option ``name``."""
    return f"algorithm.advbudget.{name}"


def read_options(algorithm: Any) -> AdapterOptions:
    """The options of verl's ``config.algorithm`` (defaults from verl's convention row);
    a bad value raises a one-line ValueError naming its ``algorithm.advbudget.*`` key.

    Examples:
        >>> options = read_options({"advbudget": {"skipped_groups": "Drop", "budget": 0.5}})
        >>> options.skipped_groups, dict(options.estimator_options), options.kappa_every
        ('drop', {'budget': 0.5}, 10)
        >>> read_options(None).solved_reward, read_options(None).max_generation_batches
        (1.0, 10)
        >>> read_options({"advbudget": {"solved_reward": "high"}})
        Traceback (most recent call last):
        ...
        ValueError: algorithm.advbudget.solved_reward: expected a finite number or null ...
    """
    settings = option(algorithm, "advbudget", None)
    return AdapterOptions.parse(
        lambda name: _given(settings, name),
        VERL,
        key=key_of,
        off="null",
        staleness_refused=None,  # read; refused where no versions exist (._staleness)
    )
