"""pytest plugin: a trainer's own shipped tests, run against advbudget's mirrors.

verl and OpenRLHF ship their unit tests in their wheels (``site-packages/tests``). The
Makefile runs them from there twice (``make test-verl``, ``make test-openrlhf``)::

    cd <site-packages> && PYTHONPATH=<repo>/tests/upstream python -m pytest \
        -c <repo>/tests/upstream/pytest.ini --rootdir=. --upstream=verl \
        --upstream-reached=<file> [--upstream-swap] tests/trainer

- stock (no ``--upstream-swap``): the trainer's own estimators run, each wrapped to note
  the tests that call it; ``<file>`` gets, per test, the estimators it reached;
- swapped: before any test module is imported, each estimator the trainer has is replaced
  by advbudget's mirror (the module function and the registry entry; the replacement is
  checked by identity), and a test that reached an estimator stock fails unless it reached
  the mirror swapped. The summary line gives the counts for the closing notes.

A test that cannot pass swapped (a documented convention) is listed in
:data:`KNOWN_DIFFERENCES` with the reason, and runs as a strict xfail.
"""

from __future__ import annotations

import functools
import json
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# trainer -> {test node id: why it cannot pass against advbudget's mirrors}
KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {"verl": {}, "openrlhf": {}}

_reached: set[str] = set()  # the estimators (trainer names) the running test reached
_swapped: dict[str, Any] = {}  # trainer name -> what now runs for it (identity check)


def _noting(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def noted(*args: Any, **kwargs: Any) -> Any:
        _reached.add(label)
        return fn(*args, **kwargs)

    return noted


def _install_verl(swap: bool) -> None:
    """Each verl estimator advbudget mirrors, in ``core_algos`` and its registry (and in
    any loaded verl module that imported it by name): noted, and swapped for ours."""
    from verl.trainer.ppo import core_algos

    from advbudget.adapters.verl import _estimators as ours

    for core, mirror in ours.MIRRORS.items():
        if core == "dr":  # verl's grpo with a switch: the grpo entry covers it
            continue
        original = getattr(core_algos, mirror.function)
        target = ours.estimator_function(ours.VERL.name_of(core)) if swap else original
        noted = _noting(mirror.verl, target)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("verl.") and (
                getattr(module, mirror.function, None) is original
            ):
                setattr(module, mirror.function, noted)
        core_algos.ADV_ESTIMATOR_REGISTRY[mirror.verl] = noted
        _swapped[mirror.verl] = target
        assert getattr(core_algos, mirror.function).__wrapped__ is target
        assert core_algos.get_adv_estimator_fn(mirror.verl).__wrapped__ is target


def _install_openrlhf(swap: bool) -> None:
    """OpenRLHF computes its estimators inside ``RemoteExperienceMaker
    .compute_advantages_and_returns``; its tests load ``experience_maker.py`` as modules
    of their own, so each module a fixture returns is patched (:func:`pytest_fixture_setup`)."""
    from advbudget.adapters.openrlhf._estimators import OPENRLHF

    for core, name in OPENRLHF.own_names.items():
        _swapped[name] = OPENRLHF.name_of(core) if swap else name


def _patch_experience_maker(module: types.ModuleType, swap: bool) -> None:
    maker = getattr(module, "RemoteExperienceMaker", None)
    original = getattr(maker, "compute_advantages_and_returns", None)
    if original is None or getattr(original, "_advbudget_upstream", False):
        return

    def compute_advantages_and_returns(self: Any, experiences: list[Any]) -> Any:
        name = self.strategy.args.algo.advantage.estimator
        if name not in _swapped:
            return original(self, experiences)
        _reached.add(name)
        if not swap:
            return original(self, experiences)
        import torch

        from advbudget.adapters.openrlhf import _estimators

        with torch.no_grad():
            return _estimators.compute_advantages_and_returns(
                self, experiences, estimator=_swapped[name]
            )

    compute_advantages_and_returns._advbudget_upstream = True  # type: ignore[attr-defined]
    maker.compute_advantages_and_returns = compute_advantages_and_returns


INSTALL: dict[str, Callable[[bool], None]] = {"verl": _install_verl, "openrlhf": _install_openrlhf}


class _State:
    def __init__(self, trainer: str, swap: bool, reached_file: Path) -> None:
        self.trainer, self.swap, self.reached_file = trainer, swap, reached_file
        self.stock: dict[str, list[str]] = json.loads(reached_file.read_text()) if swap else {}
        self.reached: dict[str, list[str]] = {}
        self.passed: set[str] = set()


_STATE = pytest.StashKey[_State]()
_REACHED = pytest.StashKey[list[str]]()  # the estimators one test reached


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("advbudget upstream")
    group.addoption("--upstream", choices=sorted(INSTALL), required=True)
    group.addoption("--upstream-swap", action="store_true")
    group.addoption("--upstream-reached", type=Path, required=True)


def pytest_configure(config: pytest.Config) -> None:
    trainer, swap = config.getoption("upstream"), config.getoption("upstream_swap")
    reached_file: Path = config.getoption("upstream_reached")
    if swap and not reached_file.is_file():
        raise pytest.UsageError(
            f"--upstream-reached: expected the stock run's file {reached_file}, got none "
            "(run the stock tests first)"
        )
    INSTALL[trainer](swap)
    config.stash[_STATE] = _State(trainer, swap, reached_file)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Any:
    value = yield
    if isinstance(value, types.ModuleType):
        _patch_experience_maker(value, request.config.stash[_STATE].swap)
    return value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[_STATE]
    if not state.swap:
        return
    for item in items:
        reason = KNOWN_DIFFERENCES[state.trainer].get(item.nodeid)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    _reached.clear()
    try:
        return (yield)
    finally:
        item.stash[_REACHED] = sorted(_reached)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.when != "call":
        return report
    state = item.config.stash[_STATE]
    reached = item.stash.get(_REACHED, [])
    state.reached[item.nodeid] = reached
    if state.swap:
        if item.nodeid not in state.stock:
            report.outcome, report.longrepr = "failed", "not run by the stock run"
        missing = sorted(set(state.stock.get(item.nodeid, [])) - set(reached))
        if missing and report.outcome == "passed":
            report.outcome = "failed"
            report.longrepr = (
                f"reached {missing} stock but not advbudget's mirrors swapped: the swap "
                "did not take"
            )
    if report.outcome == "passed" and reached:
        state.passed.add(item.nodeid)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash[_STATE]
    if not state.swap:
        state.reached_file.write_text(json.dumps(state.reached, indent=1, sort_keys=True))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash[_STATE]
    reaching = [node for node, names in state.reached.items() if names]
    what = "advbudget's mirrors" if state.swap else f"{state.trainer}'s own estimators"
    terminalreporter.write_line(
        f"advbudget upstream ({state.trainer}, {'swapped' if state.swap else 'stock'}): "
        f"{len(state.reached)} tests run, {len(reaching)} reaching {what} "
        f"({', '.join(sorted(set().union(*map(set, state.reached.values()))))}), "
        f"{len(state.passed)} of them passed"
    )
