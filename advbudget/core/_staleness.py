"""Rollouts sampled by older policies (async and off-policy training): each rollout's
policy version, its staleness (the current version minus it), and what a rule does with
the stale ones (``stale_rollouts=``).

The rules act on the call's masks, so they hold on every backend and under ``jax.jit``
(versions then traced arrays): ``drop`` and ``drop_group`` take rollouts out of their
groups' statistics as a NaN reward under ``nan_policy="omit"`` is taken out;
``baseline_only`` withholds the stale rollouts' advantages after the statistics.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

from ._arrays import Array, Namespace, as_array, is_traced, to_host
from ._groups import Groups

StaleRule = Literal["keep", "baseline_only", "drop", "drop_group"]
STALE_RULES: tuple[str, ...] = ("keep", "baseline_only", "drop", "drop_group")


@dataclass(frozen=True, eq=False)
class Staleness:
    """The policy versions of a call's rollouts and its staleness rule.

    Attributes:
        versions: ``[N]`` each rollout's policy version (the rewards' namespace and
            device, the compute dtype: exact for versions below 2**24 in float32).
        current: the trainer's current version.
        max_staleness: a rollout is stale when ``current - version > max_staleness``;
            None: no rollout is stale.
        rule: what the call did with the stale ones (``stale_rollouts``).
    """

    versions: Array
    current: int
    max_staleness: int | None
    rule: str

    @cached_property
    def staleness(self) -> Array:
        """``[N]``: ``current - version``."""
        return self.current - self.versions

    @cached_property
    def stale(self) -> Array:
        """``[N]`` bool: the rollout is older than ``max_staleness`` allows."""
        if self.max_staleness is None:
            return self.versions != self.versions  # all False, of the array's namespace
        # current - version > max_staleness, without the [N] subtraction (exact integers)
        return self.versions < self.current - self.max_staleness

    def left_out(self, groups: Groups) -> Array | None:
        """``[N]`` bool: the rollouts the rule takes out of every statistic (``drop``: the
        stale ones; ``drop_group``: every rollout of a group with a stale one); None for
        the rules that keep them in."""
        if self.rule == "drop":
            return self.stale
        if self.rule != "drop_group":
            return None
        xp = groups.xp
        stale = groups.rows(xp.astype(self.stale, self.versions.dtype))
        if groups.is_rollout is not None:  # padding slots hold copies of other rollouts
            stale = xp.where(groups.is_rollout, stale, xp.zeros_like(stale))
        touched = groups.expand(groups.max(stale) > 0)
        return groups.flat(xp.broadcast_to(touched, stale.shape))


@dataclass(frozen=True)
class StaleRequest:
    """The staleness arguments of a call, checked but for the versions' values, which
    :meth:`resolve` reads once the rewards' namespace and length are known."""

    policy_versions: Any
    current: int
    max_staleness: int | None
    rule: str

    def resolve(self, rewards: Array, xp: Namespace, device: Any) -> Staleness:
        """The versions checked against the rewards (``[N]`` integers, none newer than
        the current one), in their namespace, device and dtype."""
        versions = _versions(self.policy_versions, int(rewards.shape[0]), self.current)
        if isinstance(versions, np.ndarray):
            versions = xp.asarray(versions.astype(np.float64), dtype=rewards.dtype, device=device)
        elif versions.dtype != rewards.dtype:
            versions = xp.astype(versions, rewards.dtype)
        return Staleness(versions, self.current, self.max_staleness, self.rule)


def stale_request(
    policy_versions: Any, current_version: Any, max_staleness: Any, stale_rollouts: Any
) -> StaleRequest | None:
    """The call's staleness arguments checked (each error names its argument); None
    without ``policy_versions``."""
    if isinstance(stale_rollouts, bool) or stale_rollouts not in STALE_RULES:
        raise ValueError(f"stale_rollouts: expected one of {STALE_RULES}, got {stale_rollouts!r}")
    if policy_versions is None:
        given = {
            "current_version": current_version,
            "max_staleness": max_staleness,
            "stale_rollouts": None if stale_rollouts == "keep" else stale_rollouts,
        }
        for name, value in given.items():
            if value is not None:
                raise ValueError(
                    f"policy_versions: {name}={value!r} needs one policy version per rollout "
                    "(policy_versions=), got None"
                )
        return None
    if current_version is None:
        raise ValueError(
            "current_version: policy_versions need the trainer's current policy version "
            "(an int), got None"
        )
    current = _integer("current_version", current_version)
    if max_staleness is not None:
        max_staleness = _integer("max_staleness", max_staleness)
        if max_staleness < 0:
            raise ValueError(f"max_staleness: expected an int >= 0 or None, got {max_staleness}")
    return StaleRequest(policy_versions, current, max_staleness, str(stale_rollouts))


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an int, got {value!r}")
    return int(value)


def _versions(values: Any, n: int, current: int) -> Any:
    """``policy_versions`` checked: ``[N]`` integers, none above ``current``. A traced
    array is checked for its shape and dtype only (its values cannot be read); anything
    else is read on the host."""
    if isinstance(values, (str, bytes)):
        raise ValueError("policy_versions: expected one int per rollout, got a string")
    if hasattr(values, "shape") and not isinstance(values, np.ndarray):
        array, _ = as_array(values, "policy_versions")
        if tuple(array.shape) != (n,):
            raise ValueError(
                f"policy_versions: expected one version per rollout ({n}), got shape "
                f"{tuple(array.shape)}"
            )
        if is_traced(array):
            return array
        host = to_host(array)
    else:
        try:
            host = np.asarray(values)
        except ValueError as error:
            raise ValueError(f"policy_versions: expected one int per rollout ({error})") from None
        if host.shape != (n,):
            raise ValueError(
                f"policy_versions: expected one version per rollout ({n}), got shape {host.shape}"
            )
    if host.dtype.kind == "f":
        whole = np.isfinite(host) & (host == np.round(host))
        if not whole.all():
            bad = host[int(np.argmin(whole))].item()
            raise ValueError(f"policy_versions: expected integers, got {bad!r}")
    elif host.dtype.kind not in "iu":
        raise ValueError(
            f"policy_versions: expected integers, got {host.tolist()[0]!r} ({host.dtype})"
        )
    newer = host > current
    if newer.any():
        at = int(np.argmax(newer))
        raise ValueError(
            f"policy_versions: version {host[at].item()!r} at rollout {at} is newer than "
            f"current_version {current}"
        )
    return host
