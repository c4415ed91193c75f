"""Faults inside TRL: a failing grader, a failing κ_eff pass, empty-step metrics, resume."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")

from advbudget.adapters.trl import AdvBudgetGRPOTrainer  # noqa: E402
from advbudget.adapters.trl import rewards as trl_rewards  # noqa: E402

from .conftest import TRL_WARNINGS  # noqa: E402

pytestmark = TRL_WARNINGS


def _flaky_grade(real: Any) -> Any:
    """Raises on ground truth "boom", hangs on "hang", else grades."""

    def grade(response: str, truth: str, method: str) -> Any:
        if truth == "boom":
            raise RuntimeError("grader bug")
        if truth == "hang":
            time.sleep(3)
        return real(response, truth, method)

    return grade


def test_reward_that_raises_or_hangs_scores_none_and_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trl_rewards, "grade", _flaky_grade(trl_rewards.grade))
    monkeypatch.setenv("ADVBUDGET_REWARD_TIMEOUT_S", "0.2")
    logged: list[tuple[str, float]] = []
    start = time.perf_counter()
    rewards = trl_rewards.dapo_accuracy(
        ["Answer: 34", "Answer: 34", "Answer: 34"],
        solution=["34", "boom", "hang"],
        log_metric=lambda name, value: logged.append((name, value)),
    )
    assert time.perf_counter() - start < 2  # the hanging grader did not block the call
    assert rewards == [1.0, None, None]
    assert logged == [("advbudget/reward_failures", 2.0), ("advbudget/reward_timeouts", 1.0)]


def test_failing_reward_in_training_goes_on(
    make_trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grader raising on every sample: every reward None (NaN, nan_policy "omit"), the
    steps go on, TRL logs the failure count and the NaN fraction."""

    def broken(response: str, truth: str, method: str) -> Any:
        raise RuntimeError("grader bug")

    monkeypatch.setattr(trl_rewards, "grade", broken)
    trainer = make_trainer(AdvBudgetGRPOTrainer, reward_funcs=trl_rewards.dapo_accuracy)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "advbudget/reward_failures" in e]
    assert len(logs) == 2
    assert all(e["advbudget/reward_failures"] == 8.0 for e in logs)
    assert all(e["advbudget/nan_reward_fraction"] == 1.0 for e in logs)


def _no_none(logs: Sequence[dict[str, Any]]) -> None:
    for entry in logs:
        bad = [k for k, v in entry.items() if k.startswith("advbudget/") and v is None]
        assert not bad, f"None logged for {bad}"


def test_every_group_skipped_logs_no_none(make_trainer: Any) -> None:
    """Constant rewards: no advantage gap and no κ_eff pairs; the keys without a value are
    left out (TRL would log None, which TensorBoard refuses each step)."""

    def constant(completion_ids: Sequence[Any], **kwargs: Any) -> list[float]:
        return [1.0] * len(completion_ids)

    trainer = make_trainer(AdvBudgetGRPOTrainer, reward_funcs=constant, kappa_every=1)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "advbudget/skipped_group_fraction" in e]
    assert logs
    assert all(e["advbudget/skipped_group_fraction"] == 1.0 for e in logs)
    _no_none(trainer.state.log_history)
    assert not any("advbudget/advantage_gap_mean" in e for e in logs)
    assert not any("advbudget/kappa_eff/mean" in e for e in logs)


def test_failing_kappa_pass_is_skipped_with_a_warning(
    make_trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = make_trainer(AdvBudgetGRPOTrainer, kappa_every=1)
    real = trainer._sequence_logps
    calls = []

    def failing_after(*args: Any) -> Any:
        calls.append(1)
        if len(calls) % 2 == 0:  # the pass after the update
            raise RuntimeError("out of memory")
        return real(*args)

    monkeypatch.setattr(trainer, "_sequence_logps", failing_after)
    with pytest.warns(RuntimeWarning, match="κ_eff skipped"):
        trainer.train()
    assert trainer.state.global_step == 2
    assert not any("advbudget/kappa_eff/mean" in e for e in trainer.state.log_history)


def test_failing_kappa_pass_before_the_update(
    make_trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = make_trainer(AdvBudgetGRPOTrainer, kappa_every=1)

    def failing(*args: Any) -> Any:
        raise RuntimeError("pairs")

    monkeypatch.setattr(trainer, "_kappa_before", failing)
    with pytest.warns(RuntimeWarning, match="κ_eff skipped"):
        trainer.train()
    assert trainer.state.global_step == 2


def _kappa_steps(trainer: Any) -> list[int]:
    """Record the global step of each κ_eff pass (before the update)."""
    steps: list[int] = []
    before = trainer._kappa_before

    def kappa_before(*args: Any) -> Any:
        steps.append(trainer.state.global_step)
        return before(*args)

    trainer._kappa_before = kappa_before
    return steps


def test_resume_continues_the_kappa_schedule(make_trainer: Any, tmp_path: Path) -> None:
    """2 steps, save, resume to 4 == 4 steps at once: the same κ_eff steps, the same
    generation counter."""
    config = {"max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    whole = make_trainer(AdvBudgetGRPOTrainer, kappa_every=3, config={
        **config, "output_dir": str(tmp_path / "whole")})  # fmt: skip
    whole_steps = _kappa_steps(whole)
    whole.train()

    out = str(tmp_path / "parts")
    first = make_trainer(AdvBudgetGRPOTrainer, kappa_every=3, config={
        **config, "output_dir": out, "max_steps": 2})  # fmt: skip
    first_steps = _kappa_steps(first)
    first.train()
    saved = json.loads((Path(out) / "checkpoint-2" / "advbudget_state.json").read_text())
    assert saved["generations"] == 2
    assert set(saved) == {"generations", "memory"}  # the ledger in the memory: its own test
    second = make_trainer(AdvBudgetGRPOTrainer, kappa_every=3, config={
        **config, "output_dir": out})  # fmt: skip
    second_steps = _kappa_steps(second)
    second.train(resume_from_checkpoint=str(Path(out) / "checkpoint-2"))

    assert whole_steps == [0, 3]
    assert first_steps + second_steps == whole_steps
    assert second._advbudget_generations == whole._advbudget_generations == 4
