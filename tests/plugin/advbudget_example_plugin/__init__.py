"""An example estimator plugin: ``scale · (r − group mean)``, skipped on ties.

Its entry point (``advbudget.estimators``: ``plugin_scaled_dr``) is all it takes for the
estimator to be ``advantage_estimator="plugin_scaled_dr"`` in TRL and
``advbudget_plugin_scaled_dr`` in verl and OpenRLHF, with ``scale`` as an option there
(``+algorithm.advbudget.scale``, ``--advbudget.scale``, ``advantage_options``).
"""

from __future__ import annotations

from typing import Any

from advbudget import GroupedRewards, Rule, estimator_spec
from advbudget.checks import positive_finite


def scaled_dr(grouped: GroupedRewards, *, scale: float = 2.0) -> Any:
    """scale · (r − mean)"""
    return scale * grouped.deviation() * grouped.kept_rows()


SCALED_DR = estimator_spec(
    scaled_dr,
    name="plugin_scaled_dr",
    reference="advbudget-example-plugin (tests/plugin)",
    rules={"scale": Rule(positive_finite, "the factor")},
)


def expected(rewards: list[float], group_size: int, scale: float = 2.0) -> list[float]:
    """The plugin's advantages by a plain loop (contiguous groups), for the tests."""
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = sum(group) / len(group)
        tied = max(group) - min(group) <= 1e-6 + 1e-6 * max(abs(max(group)), abs(min(group)))
        out += [0.0 if tied else scale * (r - mean) for r in group]
    return out
