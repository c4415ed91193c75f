"""The one parser of ``--estimators a,b`` lists for every command."""

from __future__ import annotations

import typer

from advbudget.core import estimator_names, get_spec
from advbudget.core._weights import split_weighted
from advbudget.core.estimators import all_names

__all__ = ["parse_estimators"]


def parse_estimators(
    text: str,
    *,
    rewards_only: str | None = None,
    option: str = "--estimators",
    memory: str | None = None,
) -> tuple[str, ...]:
    """The names of ``text`` (comma-separated; names and aliases of the catalogue, plugins
    included). Unknown names, an empty list and, when ``rewards_only`` (why the command
    needs it) is given, estimators that need per-rollout inputs beside the reward or
    several rewards per rollout (gdpo) fail with typer's usage error naming ``option``
    and the offending names. A name may carry a difficulty weight, ``grpo+grpo_lead``."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    bases = {}
    for name in names:
        try:
            base, _ = split_weighted(name)
        except ValueError as error:
            message = str(error).removeprefix("estimator: ")
            raise typer.BadParameter(message, param_hint=option) from None
        bases[name] = base
    unknown = [name for name, base in bases.items() if base not in all_names()]
    if unknown or not names:
        raise typer.BadParameter(
            f"expected names from {estimator_names()} (each may carry a difficulty weight: "
            f"grpo+grpo_lead, budget+dqw), got {unknown or repr(text)}",
            param_hint=option,
        )
    if rewards_only is not None:
        for name in (bases[n] for n in names):
            if get_spec(name).components:
                raise typer.BadParameter(
                    f"{name} takes several rewards per rollout (reward components); {rewards_only}",
                    param_hint=option,
                )
            needs = list(get_spec(name).required_inputs)
            if needs:
                raise typer.BadParameter(
                    f"{name} needs per-rollout inputs ({', '.join(needs)}) beside the "
                    f"reward; {rewards_only}",
                    param_hint=option,
                )
    if memory is not None:
        for name in (bases[n] for n in names):
            if get_spec(name).tracker is not None:
                raise typer.BadParameter(
                    f"{name} remembers each prompt across steps; {memory}", param_hint=option
                )
    return names
