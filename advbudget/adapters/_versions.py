"""The framework versions an adapter was checked against, and the check run before use."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version


def _release(text: str) -> tuple[int, ...]:
    """``"1.16.0.dev0"`` -> ``(1, 16, 0)``: the leading numeric release parts."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(part) for part in match.groups() if part is not None) if match else ()


def check_version(
    package: str,
    adapter: str,
    low: tuple[int, ...],
    high: tuple[int, ...],
    installed: str | None = None,
) -> str:
    """Raise :class:`ImportError` unless ``package`` (installed, or the given version) is in
    ``[low, high)``; return the version checked. ``adapter`` names who needs it."""
    spec = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
    if installed is None:
        try:
            installed = version(package)
        except PackageNotFoundError:
            raise ImportError(
                f"{package}: {adapter} needs {package} (pip install '{package}{spec}'), "
                "which is not installed"
            ) from None
    release = _release(installed)
    if not (release >= low and release[: len(high)] < high):
        raise ImportError(
            f"{package}: {adapter} supports {package}{spec}, got {installed} "
            f"(install a supported version: pip install '{package}{spec}')"
        )
    return installed
