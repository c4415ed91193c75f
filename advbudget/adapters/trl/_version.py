"""The TRL versions the adapter was checked against, and the check run before trl is used."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

SUPPORTED_TRL = (">=1.16.0", "<1.17")
"""The adapter overrides private ``GRPOTrainer`` methods (``_calculate_rewards``,
``_generate_and_score_completions``) whose shapes change between TRL minor versions."""

_LOW = (1, 16, 0)
_HIGH = (1, 17)


def _release(text: str) -> tuple[int, ...]:
    """``"1.16.0.dev0"`` -> ``(1, 16, 0)``: the leading numeric release parts."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(part) for part in match.groups() if part is not None) if match else ()


def check_trl_version(installed: str | None = None) -> str:
    """Raise :class:`ImportError` unless the installed (or given) trl is supported.

    Returns:
        The version checked.

    Examples:
        >>> from advbudget.adapters.trl import check_trl_version
        >>> check_trl_version("1.16.0")
        '1.16.0'
        >>> check_trl_version("1.15.2")
        Traceback (most recent call last):
        ...
        ImportError: trl: advbudget.adapters.trl supports trl>=1.16.0,<1.17, got 1.15.2 ...
    """
    if installed is None:
        try:
            installed = version("trl")
        except PackageNotFoundError:
            raise ImportError(
                "trl: advbudget.adapters.trl needs trl (pip install 'trl>=1.16.0,<1.17'), "
                "which is not installed"
            ) from None
    release = _release(installed)
    if not (release >= _LOW and release[:2] < _HIGH):
        raise ImportError(
            f"trl: advbudget.adapters.trl supports trl{','.join(SUPPORTED_TRL)}, got {installed} "
            f"(install a supported version: pip install 'trl{','.join(SUPPORTED_TRL)}')"
        )
    return installed
