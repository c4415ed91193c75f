"""Faults inside verl: a failing grader, a failing κ_eff pass, empty-step metrics, resume."""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import pytest

verl = pytest.importorskip("verl")

import torch  # noqa: E402

from advbudget.adapters.verl import rewards as verl_rewards  # noqa: E402
from advbudget.adapters.verl.testing import algorithm_config  # noqa: E402

from .conftest import VERL_WARNINGS  # noqa: E402
from .test_metrics import FakeBatch, _kappa_trainer, hand_batch  # noqa: E402

pytestmark = VERL_WARNINGS


def test_reward_that_raises_or_hangs_scores_wrong_and_is_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = verl_rewards.grade

    def grade(response: str, truth: str, method: str) -> Any:
        if truth == "boom":
            raise RuntimeError("grader bug")
        if truth == "hang":
            time.sleep(3)
        return real(response, truth, method)

    monkeypatch.setattr(verl_rewards, "grade", grade)
    ok = verl_rewards.compute_score("s", "Answer: 34", "34", timeout=0.2)
    assert (ok["score"], ok["reward_failure"], ok["reward_timeout"]) == (1.0, 0.0, 0.0)
    failed = verl_rewards.compute_score("s", "Answer: 34", "boom", timeout=0.2)
    assert failed == {
        "score": -1.0, "acc": False, "pred": "", "reward_failure": 1.0, "reward_timeout": 0.0
    }  # fmt: skip
    start = time.perf_counter()
    hung = verl_rewards.compute_score("s", "Answer: 34", "hang", timeout=0.2, wrong=0.0)
    assert time.perf_counter() - start < 2  # the hanging grader did not block the call
    assert (hung["score"], hung["reward_failure"], hung["reward_timeout"]) == (0.0, 1.0, 1.0)
    assert ok.keys() == failed.keys() == hung.keys()  # verl's validation needs equal keys


def _advantage_trainer(monkeypatch: pytest.MonkeyPatch, stored: Any, extra: list[Any]) -> Any:
    from omegaconf import OmegaConf

    from advbudget.adapters.verl import register_trainers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_trainers()
        import transfer_queue as tq
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    def kv_batch_get(keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
        if select_fields == ["extra_fields"]:
            from tensordict import NonTensorStack, TensorDict

            return TensorDict(
                {"extra_fields": NonTensorStack.from_list(extra)}, batch_size=len(extra)
            )
        return stored

    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", lambda self, batch, metrics: batch)
    monkeypatch.setattr(tq, "kv_batch_get", kv_batch_get)
    trainer = object.__new__(get_trainer_cls("advbudget_sync"))
    trainer.config = OmegaConf.create({"algorithm": algorithm_config("reward_budget")})
    return trainer


def _stored(rewards: list[torch.Tensor], uids: list[str]) -> Any:
    from tensordict import NonTensorStack, TensorDict

    return TensorDict(
        {
            "rm_scores": torch.nested.nested_tensor(rewards, layout=torch.jagged),
            "uid": NonTensorStack.from_list(uids),
        },
        batch_size=len(uids),
    )


def test_every_group_skipped_leaves_out_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transfer_queue")
    data = hand_batch()
    uids = list(data.non_tensor_batch["uid"])
    rewards = [torch.zeros(3) for _ in uids]  # every group constant
    trainer = _advantage_trainer(monkeypatch, _stored(rewards, uids), [{}] * len(uids))
    metrics: dict[str, float] = {}
    trainer._compute_advantage(FakeBatch([{"is_padding": False}] * len(uids)), metrics=metrics)
    assert metrics["advbudget/skipped_group_fraction"] == 1.0
    assert "advbudget/advantage_gap_mean" not in metrics
    assert not any(math.isnan(value) for value in metrics.values())


def test_reward_fault_counts_reach_the_training_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """compute_score's reward_failure / reward_timeout, kept by verl in each response's
    extra_fields, are summed into advbudget/reward_{failures,timeouts} (padding left out)."""
    pytest.importorskip("transfer_queue")
    data = hand_batch()
    uids = [*data.non_tensor_batch["uid"], "pad"]
    rewards = [*data.batch["token_level_rewards"], torch.ones(3)]
    flags = [(1.0, 0.0), (1.0, 1.0)] + [(0.0, 0.0)] * 9 + [(1.0, 1.0)]  # the last: padding
    extra = [{"reward_extra_info": {"reward_failure": f, "reward_timeout": t}} for f, t in flags]
    trainer = _advantage_trainer(monkeypatch, _stored(rewards, uids), extra)
    metrics: dict[str, float] = {}
    batch = FakeBatch([{"is_padding": False}] * 11 + [{"is_padding": True}])
    trainer._compute_advantage(batch, metrics=metrics)
    assert metrics["advbudget/reward_failures"] == 2.0
    assert metrics["advbudget/reward_timeouts"] == 1.0


def test_the_graders_verdict_beside_a_shaped_score(monkeypatch: pytest.MonkeyPatch) -> None:
    """compute_score's ``acc`` (the outcome; verl's DAPO filter reads it) beside the
    score the estimator gets: with every verdict wrong, each group the estimator trains on
    is one whose outcomes tie, and advbudget/outcome_disagreement_group_fraction counts
    them (padding left out). A response without ``acc``: no such metric."""
    pytest.importorskip("transfer_queue")
    data = hand_batch()
    uids = [*data.non_tensor_batch["uid"], "pad"]
    rewards = [*data.batch["token_level_rewards"], torch.ones(3)]
    wrong = [{"reward_extra_info": {"acc": False}}] * len(uids)
    trainer = _advantage_trainer(monkeypatch, _stored(rewards, uids), wrong)
    metrics: dict[str, float] = {}
    batch = FakeBatch([{"is_padding": False}] * 11 + [{"is_padding": True}])
    trainer._compute_advantage(batch, metrics=metrics)
    trained = 1 - metrics["advbudget/skipped_group_fraction"]
    assert 0 < trained < 1  # hand_batch has skipped and trained groups
    assert metrics["advbudget/outcome_disagreement_group_fraction"] == pytest.approx(trained)
    some = [{"reward_extra_info": {}}, *wrong[1:]]
    trainer = _advantage_trainer(monkeypatch, _stored(rewards, uids), some)
    metrics = {}
    trainer._compute_advantage(batch, metrics=metrics)
    assert "advbudget/outcome_disagreement_group_fraction" not in metrics
    assert "advbudget/skipped_group_fraction" in metrics


def test_failing_kappa_pass_is_skipped_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transfer_queue")
    trainer, batch = _kappa_trainer(monkeypatch, 4, dp_size=None)

    def broken(batch: Any) -> Any:
        raise RuntimeError("CUDA out of memory")

    trainer.actor_rollout_wg.compute_log_prob = broken
    metrics: dict[str, float] = {}
    with pytest.warns(RuntimeWarning, match="κ_eff skipped at step 4"):
        assert trainer._update_actor(batch, metrics=metrics) is batch
    assert metrics == {}


def test_kappa_schedule_depends_only_on_the_restored_global_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``trainer.resume_mode=auto``: verl restores ``global_steps`` from the checkpoint and
    the trainer holds no other advbudget state, so a fresh trainer resumed at step 4 runs
    the κ_eff passes of an uninterrupted run (kappa_every=2: steps 2, 4, 6)."""
    pytest.importorskip("transfer_queue")

    def passes(trainer: Any, batch: Any, steps: range) -> list[int]:
        done = []
        for step in steps:
            trainer.global_steps = step
            before = len(trainer.actor_rollout_wg.passes)
            trainer._update_actor(batch, metrics={})
            if len(trainer.actor_rollout_wg.passes) > before:
                done.append(step)
        return done

    whole, batch = _kappa_trainer(monkeypatch, 1, dp_size=None)
    uninterrupted = passes(whole, batch, range(1, 7))
    first, batch = _kappa_trainer(monkeypatch, 1, dp_size=None)
    before_save = passes(first, batch, range(1, 4))  # checkpoint at step 3
    resumed, batch = _kappa_trainer(monkeypatch, 4, dp_size=None)  # global_steps restored
    after_resume = passes(resumed, batch, range(4, 7))
    assert uninterrupted == [2, 4, 6]
    assert before_save + after_resume == uninterrupted
    # the options are read from the config (a cache of it), not state to checkpoint
    assert set(vars(resumed)) - {"advbudget_options"} == {
        "config",
        "actor_rollout_wg",
        "global_steps",
    }


def test_nan_rewards_follow_the_configured_nan_policy() -> None:
    """+algorithm.advbudget.nan_policy: raise (default) or omit, with the fraction logged."""
    from advbudget.adapters.verl import batch_metrics, estimator_function
    from advbudget.adapters.verl.testing import make_batch

    batch = make_batch([4, 4], seed=2, shuffle=False)
    rewards = batch.batch["token_level_rewards"]
    rewards[0, batch.batch["response_mask"][0].sum() - 1] = float("nan")
    fn = estimator_function("advbudget_dr")
    kwargs = {
        "token_level_rewards": rewards,
        "response_mask": batch.batch["response_mask"],
        "index": batch.non_tensor_batch["uid"],
    }
    with pytest.raises(ValueError, match="rewards: expected finite numbers, got 1 of 8"):
        fn(**kwargs, config=algorithm_config("advbudget_dr"))
    omit = algorithm_config("advbudget_dr", nan_policy="omit")
    advantages, _ = fn(**kwargs, config=omit)
    assert not torch.isnan(advantages).any()
    assert torch.all(advantages[0] == 0)
    metrics = batch_metrics(batch, omit)
    assert metrics["advbudget/nan_reward_fraction"] == pytest.approx(1 / 8)
