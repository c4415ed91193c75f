"""The TRL versions the adapter was checked against, and the check run before trl is used."""

from __future__ import annotations

from .._versions import check_version

SUPPORTED_TRL = (">=1.13.0", "<1.17")
"""The adapter overrides private ``GRPOTrainer`` methods (:data:`._hooks.HOOKS` lists every
private TRL symbol it uses) whose shapes may change between TRL minor versions; the oldest
(1.13) and the newest (1.16) of the range are tested."""


def check_trl_version(installed: str | None = None) -> str:
    """Raise :class:`ImportError` unless the installed (or given) trl is supported.

    Returns:
        The version checked.

    Examples:
        >>> from advbudget.adapters.trl import check_trl_version
        >>> check_trl_version("1.13.0")
        '1.13.0'
        >>> check_trl_version("1.12.0")
        Traceback (most recent call last):
        ...
        ImportError: trl: advbudget.adapters.trl supports trl>=1.13.0,<1.17, got 1.12.0 ...
    """
    return check_version("trl", "advbudget.adapters.trl", (1, 13, 0), (1, 17), installed)
