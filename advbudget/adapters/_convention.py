"""Each framework's conventions, as data: one row per trainer, kept in the trainer's adapter
folder (``advbudget/adapters/<framework>/_convention.py``) and read through here: the
core knows no framework.

A framework names our estimators its own way (verl, OpenRLHF and tunix ``advbudget_<name>``,
TRL the core name) and computes the estimators it has itself with its own constants
(GRPO's eps, exact ties, verl's raw-reward groups of one). The rule, for every adapter:

- an estimator the framework has too (a *mirror*: ``own_names``) keeps the framework's
  conventions, so switching to our name changes no number;
- every other estimator (budget, a plugin's) keeps the core's defaults: ties within 1e-6
  are ties, a group of one is skipped.

Adapters contain no constants of their own: they call :meth:`Convention.settings`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from advbudget.core import (
    DEFAULT_TIE_ATOL,
    DEFAULT_TIE_RTOL,
    Estimator,
    EstimatorSpec,
    Singletons,
    get_spec,
)
from advbudget.core.estimators import all_names, as_spec, estimator_specs

from ._files import adapter_module


@dataclass(frozen=True)
class Convention:
    """How one framework computes the advantages it has, and how it names ours.

    Attributes:
        framework: ``"verl"``, ``"trl"``, ``"openrlhf"``, ``"tunix"`` or ``"skyrl"``.
        version: the framework versions the row was read from (and is tested against).
        own_names: core estimator -> the framework's own estimator computing the same
            advantages (its mirror).
        options: core estimator -> the framework's values of its options (mirrors only).
        singletons: how the framework scores a group of one (mirrors only).
        singletons_refused: the mirrors whose framework estimator (or its launcher) raises
            on a group of one: the mirror raises too (``singletons="refuse"``).
        singletons_skipped: the mirrors whose framework estimator scores a group of one 0
            where ``singletons`` says otherwise (SkyRL's rloo, beside its raw grpo).
        returns: mirror -> what the framework's returns are the reward-to-go of where they
            are not the advantages: ``"reward"`` (the reward itself, no baseline), or a
            core estimator (its advantages: the shaping before a batch whitening).
        exact_ties: the framework skips only exactly equal rewards (mirrors only).
        prefix: our estimators' names in the framework are ``prefix + name`` for every
            name and alias in the catalogue.
        extra_names: further framework names (kept from earlier releases).
        metric_prefix: the key prefix of our metrics in the framework's logs.
        kappa_every: κ_eff is logged every this many steps by default (0: off).
        memory: for an estimator with memory, where the adapter finds each rollout's
            prompt identity and where it keeps the state across a resume (docs).
        whole_batch: how the adapter hands the core the whole batch (for estimators with
            batch statistics).
        components: where the adapter finds a rollout's reward components (for
            estimators that take them, gdpo); "" where the framework keeps one reward per
            rollout: the adapter refuses those estimators.
    """

    framework: str
    version: str
    own_names: Mapping[str, str]
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    singletons: Singletons = "skip"
    singletons_refused: frozenset[str] = frozenset()
    singletons_skipped: frozenset[str] = frozenset()
    returns: Mapping[str, str] = field(default_factory=dict)
    exact_ties: bool = True
    prefix: str = "advbudget_"
    extra_names: Mapping[str, str] = field(default_factory=dict)
    metric_prefix: str = "advbudget/"
    kappa_every: int = 10
    whole_batch: str = ""
    memory: str = ""
    components: str = ""

    def name_of(self, estimator: str) -> str:
        """The framework's name for core estimator (or alias) ``estimator``.

        Examples:
            >>> from advbudget.adapters import get_convention
            >>> get_convention("verl").name_of("budget"), get_convention("trl").name_of("dr")
            ('advbudget_budget', 'dr')
        """
        return self.prefix + estimator

    def names(self) -> dict[str, str]:
        """Every framework name of our estimators -> its core name (the whole catalogue,
        plugins included)."""
        out = {self.name_of(name): get_spec(name).name for name in all_names()}
        out.update(self.extra_names)
        return out

    def core_name(self, name: str) -> str:
        """The core estimator behind framework name ``name``; a clear error if none."""
        known = self.names()
        if name not in known:
            raise ValueError(
                f"estimator: expected one of {', '.join(sorted(known))} in {self.framework}, "
                f"got {name!r}"
            )
        return known[name]

    def spec_of(self, name: str) -> EstimatorSpec | None:
        """The core spec behind framework name ``name``; None for a name that is not one of
        ours (the framework's own estimator).

        Examples:
            >>> from advbudget.adapters import get_convention
            >>> get_convention("tunix").spec_of("advbudget_spo").name
            'spo'
            >>> get_convention("tunix").spec_of("grpo") is None
            True
        """
        core = self.names().get(name)
        return None if core is None else get_spec(core)

    def is_mirror(self, estimator: str | EstimatorSpec | Estimator) -> bool:
        """Whether the framework computes ``estimator`` itself."""
        spec = as_spec(estimator)
        return spec.name in self.own_names and get_spec(spec.name) is spec

    def settings(
        self, estimator: str | EstimatorSpec | Estimator, overrides: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Keyword arguments of :func:`~advbudget.compute_advantages` for ``estimator`` in
        this framework: the conventions above, then ``overrides`` (the user's options).

        Examples:
            >>> from advbudget.adapters import get_convention
            >>> get_convention("openrlhf").settings("grpo")  # OpenRLHF's group_norm
            {'tie_rtol': 0.0, 'tie_atol': 0.0, 'singletons': 'refuse', 'eps': 1e-09,
             'std_correction': 1}
            >>> get_convention("verl").settings("budget", {"budget": 0.5})
            {'tie_rtol': 1e-06, 'tie_atol': 1e-06, 'singletons': 'skip', 'budget': 0.5}
        """
        spec = as_spec(estimator)
        mirror = self.is_mirror(spec)
        exact = mirror and self.exact_ties
        singletons: Singletons = "skip"
        if mirror and spec.name in self.singletons_refused:
            singletons = "refuse"
        elif mirror and spec.raw_singletons and spec.name not in self.singletons_skipped:
            singletons = self.singletons
        out: dict[str, Any] = {
            "tie_rtol": 0.0 if exact else DEFAULT_TIE_RTOL,
            "tie_atol": 0.0 if exact else DEFAULT_TIE_ATOL,
            "singletons": singletons,
        }
        if mirror:
            out.update(self.options.get(spec.name, {}))
        out.update(overrides or {})
        return out

    def returns_of(self, estimator: str | EstimatorSpec | Estimator) -> str:
        """What the framework's returns are for ``estimator``: ``"advantages"`` (the same
        tensor, most estimators), ``"reward"`` (the reward-to-go of the reward itself) or
        a core estimator name (the reward-to-go of its advantages).

        Examples:
            >>> from advbudget.adapters import get_convention
            >>> verl = get_convention("verl")
            >>> verl.returns_of("remax"), verl.returns_of("grpo")
            ('reward', 'advantages')
        """
        spec = as_spec(estimator)
        return self.returns.get(spec.name, "advantages") if self.is_mirror(spec) else "advantages"

    def check_rewards(self, estimator: str | EstimatorSpec | Estimator, name: str) -> None:
        """Refuse, in one line, an estimator of reward components (gdpo) where the
        framework keeps one reward per rollout (``components`` empty); ``name`` is the
        framework's name for it.

        Examples:
            >>> from advbudget.adapters import get_convention
            >>> get_convention("openrlhf").check_rewards("gdpo", "advbudget_gdpo")
            Traceback (most recent call last):
            ...
            ValueError: estimator: advbudget_gdpo takes reward components (several rewards per
            rollout), which openrlhf does not keep: it gives each rollout one reward
        """
        if as_spec(estimator).components and not self.components:
            raise ValueError(
                f"estimator: {name} takes reward components (several rewards per rollout), "
                f"which {self.framework} does not keep: it gives each rollout one reward"
            )

    def option_names(self) -> list[str]:
        """Every option name of the catalogue (one flag or key each in the framework)."""
        seen: dict[str, None] = {}
        for spec in estimator_specs():
            for option in spec.options:
                seen.setdefault(option.name)
        return list(seen)


#: The frameworks with an adapter; each keeps its row in
#: ``advbudget/adapters/<framework>/_convention.py`` (importing nothing of the framework).
FRAMEWORKS = ("verl", "openrlhf", "trl", "tunix", "skyrl")


def get_convention(framework: str) -> Convention:
    """The :class:`Convention` row of ``framework`` (``"verl"``, ``"trl"``, ``"openrlhf"``,
    ``"tunix"``, ``"skyrl"``), from its adapter's folder."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework: expected one of {sorted(FRAMEWORKS)}, got {framework!r}")
    row: Convention = getattr(adapter_module(framework, "_convention"), framework.upper())
    return row


class _Rows(Mapping[str, Convention]):
    """framework -> its row, each read from its adapter's folder when first asked for."""

    def __getitem__(self, framework: str) -> Convention:
        if framework not in FRAMEWORKS:
            raise KeyError(framework)
        return get_convention(framework)

    def __iter__(self) -> Iterator[str]:
        return iter(FRAMEWORKS)

    def __len__(self) -> int:
        return len(FRAMEWORKS)


CONVENTIONS: Mapping[str, Convention] = _Rows()
