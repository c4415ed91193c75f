"""What to tell the user when something outside advbudget is missing: the extra that
brings an optional package, or how to get a Hugging Face file that is not cached while the
Hub cannot be reached. One line each, for :func:`advbudget.lab.cli._errors.cli_errors`, the
commands that check before they start, and the console script when the lab's own packages
are missing (:func:`advbudget.lab.main`: so this module imports nothing of the lab)."""

from __future__ import annotations

import os

# The extra of pyproject.toml that brings each optional module (advbudget is installed
# from a checkout: `pip install -e ".[data]"` and so on, in it).
EXTRAS = {
    "typer": "lab",
    "rich": "lab",
    "datasets": "data",
    "pandas": "data",
    "pyarrow": "data",
    "math_verify": "rewards",
    "transformers": "eval",
    "accelerate": "eval",
    "torch": "torch",
    "matplotlib": "plot",
}
PACKAGES = {"math_verify": "math-verify"}  # where the import and the package names differ


def missing_dependency(error: ImportError, needed_for: str = "") -> str:
    """One line for a missing optional module: what to install, as an extra of the checkout
    (``pip install -e ".[eval]"``); for math-verify also the grader that needs nothing."""
    module = (error.name or "").split(".")[0]
    if not module or module == "advbudget":  # a message of its own, or not a missing package
        return str(error)
    package = PACKAGES.get(module, module)
    what = f"{needed_for} needs" if needed_for else "needs"
    extra = EXTRAS.get(module)
    if extra is None:
        return f"{what} {package}, which is not installed: pip install {package}"
    message = (
        f"{what} {package}, which is not installed: in the advbudget checkout run "
        f'pip install -e ".[{extra}]"'
    )
    if module == "math_verify":
        message += " (or pass --grader dapo, which needs nothing more)"
    return message


_HUB_ERRORS = {
    "OfflineModeIsEnabled",
    "LocalEntryNotFoundError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionError",
    "ReadTimeout",
}
_HUB_PHRASES = ("couldn't connect to 'https://huggingface.co'", "couldn't reach '")


def hub_unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) says the Hugging Face Hub could not be
    reached for files that are not in the local cache (offline mode, no network)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = {cls.__name__ for cls in type(current).__mro__}
        text = str(current).lower()
        if names & _HUB_ERRORS or any(phrase in text for phrase in _HUB_PHRASES):
            return True
        current = current.__cause__ or current.__context__
    return False


def not_cached(kind: str, repo_id: str | None, local: str = "a local path") -> str:
    """One line for a hub id (``kind`` "model" or "dataset") that is not in the local cache
    while the Hub cannot be reached, with how to fix it."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
    name = f"{kind} {repo_id}" if repo_id else kind
    if kind == "model" and repo_id:
        fetch = f"download it where the Hub can be reached (hf download {repo_id}), "
    else:  # datasets keeps its own copy once a load has worked
        fetch = "run this command once where the Hub can be reached, "
    return (
        f"{name} is not in the local Hugging Face cache and the Hub cannot be reached"
        + (" (HF_HUB_OFFLINE is set: unset it if this machine has network)" if offline else "")
        + f": {fetch}or pass {local}"
    )
