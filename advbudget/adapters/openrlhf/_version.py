"""The OpenRLHF versions the adapter was checked against, and the check run before use."""

from __future__ import annotations

from .._versions import check_version

SUPPORTED_OPENRLHF = (">=0.11.2", "<0.12")
"""The patch wraps ``RemoteExperienceMaker.compute_advantages_and_returns`` and
``BasePPOTrainer.ppo_train`` and reads OpenRLHF's dotted args (0.10.2+); tested on 0.11.2."""


def check_openrlhf_version(installed: str | None = None) -> str:
    """Raise :class:`ImportError` unless the installed (or given) openrlhf is supported.

    Returns:
        The version checked.

    Examples:
        >>> from advbudget.adapters.openrlhf import check_openrlhf_version
        >>> check_openrlhf_version("0.11.2")
        '0.11.2'
        >>> check_openrlhf_version("0.10.1")
        Traceback (most recent call last):
        ...
        ImportError: openrlhf: advbudget.adapters.openrlhf supports openrlhf>=0.11.2,<0.12, ...
    """
    return check_version("openrlhf", "advbudget.adapters.openrlhf", (0, 11, 2), (0, 12), installed)
