"""An example estimator plugin: ``scale · (r − group mean)``, skipped on ties.

Its entry point (``advbudget.estimators``: ``plugin_scaled_dr``) is all it takes for the
estimator to be ``advantage_estimator="plugin_scaled_dr"`` in TRL and
``advbudget_plugin_scaled_dr`` in verl and OpenRLHF, with ``scale`` as an option there
(``+algorithm.advbudget.scale``, ``--advbudget.scale``, ``advantage_options``).
"""

from __future__ import annotations

from typing import Any

from advbudget import EstimatorSpec, GroupedRewards, Option
from advbudget.checks import positive_finite


def scaled_dr(grouped: GroupedRewards, *, scale: float = 2.0) -> Any:
    xp = grouped.xp
    mean = grouped.sum(grouped.gap) / xp.where(grouped.count > 0, grouped.count, 1)
    keep = xp.astype(grouped.kept(), grouped.gap.dtype)
    return grouped.only_present(scale * (grouped.gap - grouped.expand(mean)) * grouped.expand(keep))


SCALED_DR = EstimatorSpec(
    name="plugin_scaled_dr",
    fn=scaled_dr,
    formula="scale · (r − mean)",
    reference="advbudget-example-plugin (tests/plugin)",
    options=(Option("scale", 2.0, positive_finite, "the factor"),),
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
