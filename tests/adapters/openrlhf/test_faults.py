"""Faults inside OpenRLHF: a failing grader, a failing κ_eff pass, empty-step metrics."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

pytest.importorskip("openrlhf")

import torch

from advbudget.adapters.openrlhf import _kappa, rewards
from advbudget.adapters.openrlhf._estimators import compute_advantages_and_returns
from advbudget.adapters.openrlhf.testing import make_args, make_experiences, make_maker

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS


def test_reward_that_raises_or_hangs_is_wrong_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    real = rewards.grade

    def grade(response: str, truth: str, method: str) -> Any:
        if truth == "boom":
            raise RuntimeError("grader bug")
        if truth == "hang":
            time.sleep(3)
        return real(response, truth, method)

    monkeypatch.setattr(rewards, "grade", grade)
    monkeypatch.setenv("ADVBUDGET_REWARD_TIMEOUT_S", "0.2")
    start = time.perf_counter()
    out = rewards.reward_func(["Answer: 34"] * 3, ["", "", ""], ["34", "boom", "hang"])
    assert time.perf_counter() - start < 2  # the hanging grader did not block the call
    assert out["rewards"].tolist() == [1.0, -1.0, -1.0]
    assert out["scores"].tolist() == [1.0, 0.0, 0.0]
    logs = out["extra_logs"]
    assert logs["advbudget/reward_failures"].tolist() == [0.0, 1.0, 1.0]
    assert logs["advbudget/reward_timeouts"].tolist() == [0.0, 0.0, 1.0]
    assert logs["reward_error"].tolist() == [0.0, 1.0, 1.0]


def test_every_group_skipped_leaves_out_the_gap() -> None:
    """No group with a gap: the advantage gap has no value; OpenRLHF would log NaN (its
    per-sample mean), so the key is left out of every experience of the step."""
    experiences = make_experiences(3, 4, constant_groups=3)
    maker = make_maker(make_args("reward_budget", 4), 0.0)
    out = compute_advantages_and_returns(maker, experiences)
    for experience in out:
        assert "advbudget/advantage_gap_mean" not in experience.info
        assert experience.info["advbudget/skipped_group_fraction"] == [1.0] * len(experience.index)
        for key, values in experience.info.items():
            if key.startswith("advbudget/"):
                assert not any(math.isnan(v) for v in torch.as_tensor(values).tolist()), key


class _Maker:
    def __init__(self, pairs: Any) -> None:
        self._advbudget_kappa_pairs = pairs


def test_failing_kappa_pass_is_skipped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Any exception of the extra forward (not only ValueError): a warning, no κ_eff keys."""
    from types import SimpleNamespace

    def broken(pairs: Any, forward: Any) -> Any:
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(_kappa, "kappa_eff_status", broken)
    monkeypatch.setattr(_kappa, "actor_forward", lambda trainer: None)
    args = make_args("reward_budget", 4)
    args.advbudget = SimpleNamespace(kappa_every=1)
    trainer = SimpleNamespace(args=args, experience_maker=_Maker(object()))
    with caplog.at_level("WARNING", logger="advbudget.adapters.openrlhf"):
        assert _kappa.after_update(trainer, 3) == {}
    assert "κ_eff skipped at step 4" in caplog.text  # ppo_train(3): OpenRLHF's step 4
    assert trainer.experience_maker._advbudget_kappa_pairs is None


def test_due_kappa_pass_without_pairs_says_why(caplog: pytest.LogCaptureFixture) -> None:
    """A due step whose pairs were never kept (our advantages did not run in this process)
    is a warning, not a silent gap; a step that is not due says nothing."""
    from types import SimpleNamespace

    args = make_args("reward_budget", 4)
    args.advbudget = SimpleNamespace(kappa_every=2)
    trainer = SimpleNamespace(args=args, experience_maker=_Maker(None))
    with caplog.at_level("WARNING", logger="advbudget.adapters.openrlhf"):
        assert _kappa.after_update(trainer, 0) == {}  # step 1: not due
        assert not caplog.text
        assert _kappa.after_update(trainer, 1) == {}  # step 2: due
    assert "κ_eff skipped at step 2: no pairs were kept" in caplog.text


def test_nan_rewards_follow_the_configured_nan_policy() -> None:
    """--advbudget.nan_policy: raise (default) names the rollout; omit leaves it out of its
    group and reports the step's fraction in advbudget/nan_reward_fraction."""
    from types import SimpleNamespace

    experiences = make_experiences(3, 4, seed=1)
    experiences[0].rewards[0] = float("nan")
    args = make_args("advbudget_dr_grpo", 4)
    with pytest.raises(ValueError, match="rewards: expected finite numbers, got 1 of 12"):
        compute_advantages_and_returns(make_maker(args), list(experiences))
    args.advbudget = SimpleNamespace(nan_policy="omit")
    out = compute_advantages_and_returns(make_maker(args), experiences)
    fractions = [v for e in out for v in e.info["advbudget/nan_reward_fraction"]]
    assert fractions == pytest.approx([1 / 12] * 12)
    first = out[0]
    assert torch.all(first.advantages[0] == 0)  # the NaN sample takes no part
    assert not torch.isnan(torch.cat([e.advantages.reshape(-1) for e in out])).any()
