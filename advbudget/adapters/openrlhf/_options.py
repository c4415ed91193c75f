"""OpenRLHF's advbudget options: ``--advbudget.<name>`` (``args.advbudget.<name>`` in
OpenRLHF's hierarchised args), read once per process into one
:class:`~advbudget.adapters._options.AdapterOptions`."""

from __future__ import annotations

from typing import Any

from .._features import check_memory
from .._options import UNSET, AdapterOptions
from ._convention import OPENRLHF

#: Where :func:`options_of` keeps the record on the object the patch hands around.
_OPTIONS_ATTR = "_advbudget_options"


def key_of(name: str) -> str:
    """OpenRLHF's flag of our option ``name``."""
    return f"--advbudget.{name}"


def read_options(args: Any) -> AdapterOptions:
    """The options of OpenRLHF's hierarchised ``args`` (a flag not given, None, takes its
    default); a bad value raises a one-line ValueError naming its ``--advbudget.*`` flag.

    κ_eff's default (every 10 steps) is the launcher's flag default: args without it
    (OpenRLHF's own ``train_ppo_ray`` with the patch installed, no ``args.advbudget``)
    never ran κ_eff, and still do not.

    Examples:
        >>> from types import SimpleNamespace
        >>> options = read_options(SimpleNamespace(advbudget=SimpleNamespace(budget=0.5)))
        >>> dict(options.estimator_options), options.kappa_every, options.solved_reward
        ({'budget': 0.5}, 0, 1.0)
        >>> print(read_options(SimpleNamespace(advbudget=None)).solved_reward)
        1.0
        >>> off = SimpleNamespace(advbudget=SimpleNamespace(solved_reward="none"))
        >>> print(read_options(off).solved_reward)
        None
        >>> read_options(SimpleNamespace(advbudget=SimpleNamespace(skipped_groups="skip")))
        Traceback (most recent call last):
        ...
        ValueError: --advbudget.skipped_groups: expected one of keep, drop, resample, got 'skip'
    """
    settings = getattr(args, "advbudget", None)

    def read(name: str) -> Any:
        value = getattr(settings, name, None)
        if value is None:
            return 0 if name == "kappa_every" else UNSET
        return value

    return AdapterOptions.parse(read, OPENRLHF, key=key_of, off="none")


def options_of(holder: Any, args: Any) -> AdapterOptions:
    """The run's options, read from ``args`` the first time and kept on ``holder`` (the
    experience maker, the samples generator: objects that live in one actor, never
    shipped), so each process reads and checks them once."""
    options = getattr(holder, _OPTIONS_ATTR, None)
    if options is None:
        options = read_options(args)
        name = getattr(getattr(getattr(args, "algo", None), "advantage", None), "estimator", "")
        check_memory(OPENRLHF.spec_of(name), options, key_of)
        setattr(holder, _OPTIONS_ATTR, options)
    return options
