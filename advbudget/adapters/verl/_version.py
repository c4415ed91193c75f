"""The verl versions the adapter was checked against, and the check run before verl is used."""

from __future__ import annotations

from .._versions import check_version

SUPPORTED_VERL = (">=0.9.1", "<0.10")
"""The adapter overrides private v1-trainer and replay-buffer methods of verl 0.9.1
(:data:`._hooks.HOOKS`), whose shapes change between verl minor versions."""


def check_verl_version(installed: str | None = None) -> str:
    """Raise :class:`ImportError` unless the installed (or given) verl is supported.

    Returns:
        The version checked.

    Examples:
        >>> check_verl_version("0.9.1")
        '0.9.1'
        >>> check_verl_version("0.10.0")
        Traceback (most recent call last):
        ...
        ImportError: verl: advbudget.adapters.verl supports verl>=0.9.1,<0.10, got 0.10.0 ...
    """
    return check_version("verl", "advbudget.adapters.verl", (0, 9, 1), (0, 10), installed)
