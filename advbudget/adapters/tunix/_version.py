"""The tunix versions the adapter was checked against, and the check run before tunix is
used."""

from __future__ import annotations

from .._versions import check_version

SUPPORTED_TUNIX = ((0, 1, 7), (0, 1, 8))
"""The google-tunix releases ``[low, high)`` the adapter was read from and is tested against:
it overrides private ``GRPOLearner`` methods and calls private ``RLCluster`` ones
(:data:`._hooks.HOOKS` lists every tunix symbol it relies on), which tunix changes between
releases."""


def check_tunix_version(installed: str | None = None) -> str:
    """Raise :class:`ImportError` unless the installed (or given) google-tunix is supported.

    Returns:
        The version checked.

    Examples:
        >>> from advbudget.adapters.tunix import check_tunix_version
        >>> check_tunix_version("0.1.7")
        '0.1.7'
        >>> check_tunix_version("0.2.0")
        Traceback (most recent call last):
        ...
        ImportError: google-tunix: advbudget.adapters.tunix supports google-tunix>=0.1.7,<0.1.8, ...
    """
    return check_version("google-tunix", "advbudget.adapters.tunix", *SUPPORTED_TUNIX, installed)
