"""A pytest plugin: where the environment must have a package, a skip for want of it fails.

``ADVBUDGET_REQUIRE=verl,transfer_queue,...`` (each trainer's ``make test-<fw>`` sets it)
names the packages an environment is built with. A test or a whole module skipped because
one of them, or a module inside one, could not be imported (``pytest.importorskip``:
"could not import 'transfer_queue.client'") then fails instead, naming the package: a
broken install stops the suite rather than shrinking it. Every other skip (no GPU, no
bash) stays a skip. The repository's ``conftest.py`` loads it; ``-p
advbudget.testing._required`` loads it anywhere. (PYTEST_DONT_REWRITE: that conftest
imports it before pytest registers it; it has no asserts to rewrite.)
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

REQUIRE_ENV = "ADVBUDGET_REQUIRE"
_COULD_NOT_IMPORT = re.compile(r"could not import '([\w.]+)'")


def required() -> frozenset[str]:
    """The top-level package names of ``ADVBUDGET_REQUIRE`` (comma-separated)."""
    names = os.environ.get(REQUIRE_ENV, "").split(",")
    return frozenset(name.strip() for name in names if name.strip())


def missing_required(report: Any) -> str | None:
    """The required module whose import failure skipped ``report``, or None."""
    if not report.skipped:
        return None
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    match = _COULD_NOT_IMPORT.search(reason)
    if match and match.group(1).split(".")[0] in required():
        return match.group(1)
    return None


def _fail_if_required(report: Any) -> None:
    module = missing_required(report)
    if module is not None:
        report.outcome = "failed"
        report.longrepr = (
            f"{module} could not be imported, and {REQUIRE_ENV} says this environment must "
            f"have {module.split('.')[0]} ({os.environ[REQUIRE_ENV]}): a broken install, "
            "not a skip"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    _fail_if_required(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report = yield
    _fail_if_required(report)
    return report
