"""Fault containment for the framework wrappers: a grader call that raises or runs too long.

:func:`guarded` runs one grader call in a daemon thread and waits at most ``timeout``
seconds. Signals (math-verify's ``signal.alarm``) work only in the main thread, and the
wrappers run in TRL's main thread, verl's reward-loop executor threads and OpenRLHF's
``asyncio.to_thread`` workers, so the timeout is a thread join: it works in all of them.
A grader that overruns cannot be killed; its thread is left running as a daemon (it never
blocks the step or the interpreter's exit), and once :data:`MAX_RUNAWAY` such threads are
still alive, further calls fail at once as timeouts instead of starting more.

The timeout is ``ADVBUDGET_REWARD_TIMEOUT_S`` (seconds, read at each call; default
:data:`DEFAULT_TIMEOUT_S`; ``0`` runs the grader inline, with no timeout).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

DEFAULT_TIMEOUT_S = 10.0
TIMEOUT_ENV = "ADVBUDGET_REWARD_TIMEOUT_S"
MAX_RUNAWAY = 16
MAX_LOGGED = 10

_logger = logging.getLogger("advbudget.rewards")
_lock = threading.Lock()
_runaway: list[threading.Thread] = []
_logged = 0

Failure = Literal["error", "timeout"]


class Outcome(NamedTuple):
    value: Any  # the grader's result, None on failure
    failure: Failure | None  # None when the grader returned


def reward_timeout(timeout: float | None = None) -> float:
    """The per-sample timeout in seconds: ``timeout`` if given, else the environment's."""
    if timeout is None:
        text = os.environ.get(TIMEOUT_ENV)
        if text is None:
            return DEFAULT_TIMEOUT_S
        try:
            timeout = float(text)
        except ValueError:
            raise ValueError(f"{TIMEOUT_ENV}: expected a number of seconds, got {text!r}") from None
    if not timeout >= 0:  # also refuses NaN
        raise ValueError(f"timeout: expected seconds >= 0, got {timeout!r}")
    return float(timeout)


def guarded(grader: Callable[[], Any], timeout: float, what: str) -> Outcome:
    """``grader()``, or the failure: ``"error"`` if it raised, ``"timeout"`` if it did not
    return within ``timeout`` seconds (``0``: inline, no timeout). Never raises an
    ``Exception`` of the grader's; logs the first :data:`MAX_LOGGED` failures."""
    if timeout == 0:
        try:
            return Outcome(grader(), None)
        except Exception as error:
            _log(what, f"{type(error).__name__}: {error}")
            return Outcome(None, "error")
    with _lock:
        _runaway[:] = [thread for thread in _runaway if thread.is_alive()]
        saturated = len(_runaway) >= MAX_RUNAWAY
    if saturated:
        _log(what, f"{MAX_RUNAWAY} earlier graders are still running; not starting another")
        return Outcome(None, "timeout")
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, grader()))
        except BaseException as error:
            box.append((False, error))

    thread = threading.Thread(target=run, name="advbudget-grader", daemon=True)
    thread.start()
    thread.join(timeout)
    if not box:
        with _lock:
            _runaway.append(thread)
        _log(what, f"no result after {timeout:g} s (timeout)")
        return Outcome(None, "timeout")
    ok, value = box[0]
    if ok:
        return Outcome(value, None)
    if not isinstance(value, Exception):  # KeyboardInterrupt, SystemExit: not ours to hide
        raise value
    _log(what, f"{type(value).__name__}: {value}")
    return Outcome(None, "error")


def _log(what: str, message: str) -> None:
    global _logged
    with _lock:
        _logged += 1
        number = _logged
    if number <= MAX_LOGGED:
        more = " (no more will be logged)" if number == MAX_LOGGED else ""
        _logger.warning("%s: grader failed, scored as failed: %s%s", what, message, more)
