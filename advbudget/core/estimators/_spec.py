"""What the rest of the library knows about an estimator: :class:`EstimatorSpec`.

A spec is built from the estimator's function (:func:`estimator_spec`): its keyword
parameters with defaults are its options, so each default is written once, in the
signature; a :class:`Rule` per option adds the check and the line the docs show.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .._arrays import Array
from .._state import Tracker

Estimator = Callable[..., Array]
"""``estimator(grouped: GroupedRewards, **options, **inputs) -> advantages as rows``."""

SkipRule = Literal["ties", "never"]
Check = Callable[[str, Any], Any]
"""``check(option_name, value) -> value``, converted; raises naming the option."""


def _any(name: str, value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Rule:
    """How one option is checked (``check(name, value)`` converts or raises) and the line
    the docs and ``--help`` show for it."""

    check: Check = _any
    doc: str = ""


@dataclass(frozen=True)
class Option:
    """An estimator option: its name, default, a check that converts or raises, a line."""

    name: str
    default: Any
    check: Check = _any
    doc: str = ""

    def value(self, given: Any) -> Any:
        return self.check(self.name, given)


@dataclass(frozen=True)
class Input:
    """An extra per-rollout array an estimator needs beside the rewards, ``[N]``."""

    name: str
    doc: str
    required: bool = True


@dataclass(frozen=True)
class EstimatorSpec:
    """Everything about one estimator that code outside its function needs.

    Build one with :func:`estimator_spec` (options from the function's signature).

    Attributes:
        name: the core name (``"budget"``); frameworks use ``advbudget_<name>``.
        fn: ``fn(grouped, **options, **inputs) -> advantages as rows``.
        formula: the advantage of a rollout, in one line (docs).
        reference: where it comes from (paper, framework).
        aliases: other names for it (the names frameworks and papers use).
        options: its options; anything else given to it is an error.
        inputs: extra per-rollout arrays (``response_lengths=``), laid out as rows before
            ``fn`` sees them.
        components: it takes several rewards per rollout, one per reward component
            (``rewards`` ``[N, K]``, or a mapping name -> ``[N]``), each checked and laid
            out by group on its own (``grouped.components``); ``grouped.rewards`` is then
            their sum. False (every other estimator): one reward per rollout, ``[N]``.
        skips: ``"ties"``: a group with no reward gap (or of one) gets advantage 0 and
            ``valid`` False; ``"never"``: only groups without any reward are skipped (for
            estimators whose advantage is not 0 on a constant group: batch whitening, a
            given baseline).
        raw_singletons: whether the estimator scores a group of one against a baseline
            of 0 when asked (``singletons="raw"``, verl's convention), which it does by
            calling :meth:`GroupedRewards.with_raw_singletons`. Opt-in: without it,
            ``singletons="raw"`` is refused rather than silently giving 0.
        batch_statistics: what it computes over the whole batch rather than per group
            ("" for none); adapters call the core on the whole (gathered) batch.
        slope_of: for :func:`advbudget.theory.implied_slope`: the estimator whose slope
            this one has up to a positive factor set by the batch (whitening), or None.
        tracker: for an estimator that remembers prompts across steps, what it keeps per
            prompt (:class:`~advbudget.core._state.Tracker`); its calls take ``state=`` and
            ``prompt_ids=``, and ``fn`` gets each rollout's remembered baseline as
            ``tracked=`` (rows). None for every estimator without memory.
        turns: it scores the rows (turns) of multi-turn trajectories, not one reward per
            rollout (``"gigpo"``): its calls take ``trajectory_ids=`` and ``group_ids=``,
            its inputs stay one value per row, and ``fn(turns, **options, **inputs)``
            gets a :class:`~advbudget.core._trajectories.TurnRows` and returns ``[N]``
            advantages, one per row.
    """

    name: str
    fn: Estimator
    formula: str = ""
    reference: str = ""
    aliases: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    inputs: tuple[Input, ...] = ()
    components: bool = False
    skips: SkipRule = "ties"
    raw_singletons: bool = False
    batch_statistics: str = ""
    slope_of: str | None = None
    tracker: Tracker | None = None
    turns: bool = False

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    @property
    def required_inputs(self) -> tuple[str, ...]:
        """The names of the per-rollout inputs a call must pass (``response_lengths``, ...):
        a trainer that hands an estimator none of them cannot run it."""
        return tuple(i.name for i in self.inputs if i.required)

    def resolve_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The options for ``fn``: defaults, overridden by ``given``, each checked."""
        known = {o.name for o in self.options}
        unknown = sorted(set(given) - known)
        if unknown:
            takes = ", ".join(sorted(known | {i.name for i in self.inputs})) or "no options"
            raise TypeError(
                f"{unknown[0]}: not an option of estimator {self.name!r} (it takes {takes})"
            )
        return {o.name: o.value(given.get(o.name, o.default)) for o in self.options}

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def _keyword_defaults(fn: Estimator) -> list[inspect.Parameter]:
    """The parameters after the first (the grouped rewards) that have a default."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):  # builtins and some callables have no signature
        return []
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in parameters if p.kind in kinds and p.default is not p.empty]


def estimator_spec(
    fn: Estimator,
    *,
    name: str | None = None,
    formula: str | None = None,
    reference: str | None = None,
    aliases: Iterable[str] = (),
    rules: Mapping[str, Rule] | None = None,
    inputs: Iterable[Input] = (),
    components: bool = False,
    skips: SkipRule = "ties",
    raw_singletons: bool = False,
    batch_statistics: str = "",
    slope_of: str | None = None,
    tracker: Tracker | None = None,
    turns: bool = False,
) -> EstimatorSpec:
    """The spec of an estimator function.

    Its keyword parameters with defaults are its options (the default read from the
    signature), checked and described by ``rules[option]`` where given; a parameter
    named like one of ``inputs`` is that input, not an option. ``name`` defaults to the
    function's name, ``formula`` to its docstring's first line, ``reference`` to its
    module.

    Examples:
        >>> from advbudget import estimator_spec, Rule
        >>> from advbudget.checks import positive_finite
        >>> def scaled_dr(grouped, *, scale=2.0):
        ...     '''scale · (r − mean)'''
        ...     return scale * grouped.deviation() * grouped.kept_rows()
        >>> spec = estimator_spec(scaled_dr, rules={"scale": Rule(positive_finite, "the factor")})
        >>> spec.name, spec.formula, spec.options[0].default
        ('scaled_dr', 'scale · (r − mean)', 2.0)
    """
    inputs = tuple(inputs)
    input_names = {i.name for i in inputs}
    rules = dict(rules or {})
    options = []
    for parameter in _keyword_defaults(fn):
        if parameter.name in input_names:
            continue
        rule = rules.pop(parameter.name, Rule())
        options.append(Option(parameter.name, parameter.default, rule.check, rule.doc))
    label = str(name or getattr(fn, "__name__", "custom"))
    if rules:
        raise TypeError(
            f"rules: {sorted(rules)[0]!r} is not a keyword parameter with a default of "
            f"estimator {label!r}"
        )
    doc = (inspect.getdoc(fn) or "").strip().splitlines()
    return EstimatorSpec(
        name=label,
        fn=fn,
        formula=(doc[0] if doc else "") if formula is None else formula,
        reference=(getattr(fn, "__module__", "") or "") if reference is None else reference,
        aliases=tuple(aliases),
        options=tuple(options),
        inputs=inputs,
        components=components,
        skips=skips,
        raw_singletons=raw_singletons,
        batch_statistics=batch_statistics,
        slope_of=slope_of,
        tracker=tracker,
        turns=turns,
    )


F = TypeVar("F", bound=Estimator)


def declare_into(specs: list[EstimatorSpec]) -> Callable[..., Callable[[F], F]]:
    """A decorator that appends ``estimator_spec(fn, **details)`` to ``specs``: a
    built-in's spec sits right above its function."""

    def declare(**details: Any) -> Callable[[F], F]:
        def add(fn: F) -> F:
            specs.append(estimator_spec(fn, **details))
            return fn

        return add

    return declare
