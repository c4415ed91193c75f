"""The SkyRL versions the adapter was checked against, and the check run before SkyRL is used."""

from __future__ import annotations

from .._versions import check_version

SUPPORTED_SKYRL = (">=0.4.0", "<0.5")
"""The adapter subclasses SkyRL 0.4's trainer and experiment and reads its registry
(:data:`._hooks.HOOKS`), whose shapes change between SkyRL minor versions."""


def check_skyrl_version(installed: str | None = None) -> str:
    """Raise :class:`ImportError` unless the installed (or given) SkyRL is supported.

    Returns:
        The version checked.

    Examples:
        >>> check_skyrl_version("0.4.0")
        '0.4.0'
        >>> check_skyrl_version("0.5.1")
        Traceback (most recent call last):
        ...
        ImportError: skyrl: advbudget.adapters.skyrl supports skyrl>=0.4.0,<0.5, got 0.5.1 ...
    """
    return check_version("skyrl", "advbudget.adapters.skyrl", (0, 4, 0), (0, 5), installed)
