"""The metrics the trainers add to verl's metrics dict, on real ``DataProto`` batches."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pytest

verl = pytest.importorskip("verl")

import torch  # noqa: E402
from verl import DataProto  # noqa: E402

from advbudget.adapters.verl import METRIC_PREFIX, batch_metrics  # noqa: E402
from advbudget.adapters.verl.testing import algorithm_config  # noqa: E402

from .conftest import VERL_WARNINGS  # noqa: E402

pytestmark = VERL_WARNINGS

DOCUMENTED = {
    "skipped_group_fraction",
    "unsolved_group_fraction",
    "solved_group_fraction",
    "advantage_gap_mean",
    "positive_advantage_fraction",
    "valid_fraction",
    "advantage_mean",
    "advantage_std",
    "advantage_min",
    "advantage_max",
    "nan_reward_fraction",
    "group_mean_p10",
    "group_mean_p50",
    "group_mean_p90",
}


def hand_batch() -> DataProto:
    """Groups: a = 1 of 4 correct, b = constant, c = 1 of 2, d = a group of one; shuffled."""
    uids = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 2 + ["d"], dtype=object)
    scores = np.array([1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1], dtype=np.float32)
    order = np.random.default_rng(0).permutation(len(uids))
    rewards = np.zeros((len(uids), 3), np.float32)
    rewards[:, -1] = scores
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.from_numpy(rewards[order]),
            "response_mask": torch.ones(len(uids), 3),
        },
        non_tensors={"uid": uids[order]},
    )


def test_budget_metrics_by_hand() -> None:
    metrics = batch_metrics(hand_batch(), algorithm_config("reward_budget"))
    assert set(metrics) == {METRIC_PREFIX + key for key in DOCUMENTED}
    # b (no gap) and d (one response) are skipped; a and c each span a gap of 1.
    assert metrics["advbudget/skipped_group_fraction"] == 0.5
    assert metrics["advbudget/advantage_gap_mean"] == pytest.approx(1.0)
    assert metrics["advbudget/positive_advantage_fraction"] == pytest.approx(2 / 11)
    assert metrics["advbudget/valid_fraction"] == pytest.approx(6 / 11)
    assert metrics["advbudget/advantage_max"] == pytest.approx(0.75)
    assert metrics["advbudget/advantage_min"] == pytest.approx(-0.5)
    # b (all 1) and d (its one response is 1) are solved; no group has no 1.
    assert metrics["advbudget/solved_group_fraction"] == 0.5
    assert metrics["advbudget/unsolved_group_fraction"] == 0.0
    assert all(isinstance(v, float) for v in metrics.values())


def test_solved_split_follows_solved_reward() -> None:
    """``+algorithm.advbudget.solved_reward``: the bar of the split (sequence rewards, the
    token rewards' sum), ``null`` (or hydra's string ``None``) leaves the keys out; a bad
    value is one line naming the option."""
    data = hand_batch()
    # DAPO's +-1: scores 0 become -1; the default bar 1.0 gives the same split
    data.batch["token_level_rewards"][:, -1] = data.batch["token_level_rewards"][:, -1] * 2 - 1
    metrics = batch_metrics(data, algorithm_config("reward_budget"))
    assert metrics["advbudget/solved_group_fraction"] == 0.5
    assert metrics["advbudget/unsolved_group_fraction"] == 0.0
    # a bar above every reward: every group unsolved; below every reward: every one solved
    high = batch_metrics(data, algorithm_config("reward_budget", solved_reward=2))
    assert high["advbudget/unsolved_group_fraction"] == 1.0
    assert high["advbudget/solved_group_fraction"] == 0.0
    low = batch_metrics(data, algorithm_config("reward_budget", solved_reward=-1.0))
    assert low["advbudget/solved_group_fraction"] == 1.0
    for off in (None, "None", "null"):
        metrics = batch_metrics(data, algorithm_config("reward_budget", solved_reward=off))
        assert "advbudget/solved_group_fraction" not in metrics, off
        assert "advbudget/unsolved_group_fraction" not in metrics, off
        assert "advbudget/skipped_group_fraction" in metrics
    for bad in (True, "high", float("nan")):
        message = (
            r"^algorithm\.advbudget\.solved_reward: expected a finite number or null \(off\), "
            f"got {bad!r}"
        )
        with pytest.raises(ValueError, match=message):
            batch_metrics(data, algorithm_config("reward_budget", solved_reward=bad))


def test_solved_split_with_graded_rewards_and_nan_omitted() -> None:
    """Graded token rewards (the sum is the sequence reward) and NaN rewards left out under
    ``nan_policy: omit``: a NaN response is no response of its group."""
    uids = np.array(["a"] * 3 + ["b"] * 3 + ["c"] * 3 + ["d"] * 2, dtype=object)
    # sequence rewards: a = [0.9, 1.0, 0.9] (bar 0.9: solved), b = [0.5, 0.2, nan]
    # (unsolved), c = [0.9, 0.1, nan] (mixed), d = [nan, nan] (no reward: left out)
    nan = float("nan")
    halves = [0.45, 0.5, 0.45, 0.25, 0.1, nan, 0.45, 0.05, nan, nan, nan]
    rewards = torch.tensor([[h, h] for h in halves], dtype=torch.float64)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(11, 2)},
        non_tensors={"uid": uids},
    )
    config = algorithm_config("reward_budget", nan_policy="omit", solved_reward=0.9)
    metrics = batch_metrics(data, config)
    assert metrics["advbudget/solved_group_fraction"] == pytest.approx(1 / 3)
    assert metrics["advbudget/unsolved_group_fraction"] == pytest.approx(1 / 3)
    assert metrics["advbudget/nan_reward_fraction"] == pytest.approx(4 / 11)


def test_trainer_checks_solved_reward_before_verl_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad ``+algorithm.advbudget.solved_reward`` fails in our trainer's ``__init__``,
    before verl's (which loads the models); a good one reaches verl."""
    pytest.importorskip("transfer_queue")
    from omegaconf import OmegaConf

    from advbudget.adapters.verl import register_trainers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_trainers()
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    started = []
    monkeypatch.setattr(PPOTrainer, "__init__", lambda self, config: started.append(1))

    def config(value: Any) -> Any:
        return OmegaConf.create(
            {
                "trainer": {"v1": {"trainer_mode": "advbudget_sync"}},
                "algorithm": {"advbudget": {"solved_reward": value}},
            }
        )

    with pytest.raises(ValueError, match=r"^algorithm\.advbudget\.solved_reward: .* got 'x'$"):
        get_trainer_cls("advbudget_sync")(config("x"))
    assert started == []
    get_trainer_cls("advbudget_sync")(config(0.5))
    assert started == [1]


def test_verl_grpo_is_described_by_advbudget_grpo() -> None:
    metrics = batch_metrics(hand_batch(), algorithm_config("grpo"))
    # verl's grpo scores a group of one (d) against mean 0, std 1: it is not skipped.
    assert metrics["advbudget/skipped_group_fraction"] == 0.25
    gap_a = 1 / (0.5 + 1e-6)  # (1 - 0.25) / std and (0 - 0.25) / std, std = 0.5 (N-1)
    gap_c = 1 / (math.sqrt(0.5) + 1e-6)  # (1 - 0.5) / std and (0 - 0.5) / std
    expected = (gap_a + gap_c + 0.0) / 3  # d's gap is 0 (one response)
    assert metrics["advbudget/advantage_gap_mean"] == pytest.approx(expected, rel=1e-5)
    assert metrics["advbudget/positive_advantage_fraction"] == pytest.approx(3 / 11)


def test_non_group_estimator_gives_nothing() -> None:
    assert batch_metrics(hand_batch(), algorithm_config("gae")) == {}


def test_all_groups_skipped() -> None:
    data = hand_batch()
    data.batch["token_level_rewards"][:] = 0
    metrics = batch_metrics(data, algorithm_config("reward_budget"))
    assert metrics["advbudget/skipped_group_fraction"] == 1.0
    assert math.isnan(metrics["advbudget/advantage_gap_mean"])


def test_trainers_registered() -> None:
    pytest.importorskip("transfer_queue")
    from advbudget.adapters.verl import register_trainers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = register_trainers()
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    assert "advbudget_sync" in names
    cls = get_trainer_cls("advbudget_sync")
    assert issubclass(cls, PPOTrainerSync)
    from advbudget.adapters.verl._hooks import TrainerHooks

    # verl's methods are overridden (by the hooks, ahead of verl's class in the bases)
    assert cls._compute_advantage is TrainerHooks._compute_advantage
    assert cls._update_actor is TrainerHooks._update_actor
    assert register_trainers() == names  # idempotent


class FakeBatch:
    """The parts of TransferQueue's ``KVBatchMeta`` the trainers read."""

    def __init__(self, tags: list[dict[str, bool]]) -> None:
        self.keys = [f"k{i}" for i in range(len(tags))]
        self.partition_id = "train"
        self.tags = tags
        self.extra_info: dict[str, object] = {}


def test_trainer_adds_metrics_after_verl_advantages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The override on verl's real sync trainer: verl's step, then ours, from TransferQueue
    fields (jagged tensors, uid as non-tensor data; padding rows left out)."""
    pytest.importorskip("transfer_queue")
    from omegaconf import OmegaConf
    from tensordict import NonTensorStack, TensorDict

    from advbudget.adapters.verl import register_trainers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_trainers()
        import transfer_queue as tq
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    data = hand_batch()
    uids = [*data.non_tensor_batch["uid"], "pad"]
    scores = [*data.batch["token_level_rewards"], torch.ones(3)]
    stored = TensorDict(
        {
            "rm_scores": torch.nested.nested_tensor(scores, layout=torch.jagged),
            "uid": NonTensorStack.from_list(uids),
        },
        batch_size=len(uids),
    )
    calls = []
    monkeypatch.setattr(
        PPOTrainerSync, "_compute_advantage", lambda self, batch, metrics: calls.append(1) or batch
    )
    monkeypatch.setattr(tq, "kv_batch_get", lambda keys, partition_id, select_fields: stored)
    trainer = object.__new__(get_trainer_cls("advbudget_sync"))
    trainer.config = OmegaConf.create({"algorithm": algorithm_config("reward_budget")})
    batch = FakeBatch([{"is_padding": False}] * 11 + [{"is_padding": True}])
    metrics: dict[str, float] = {}
    assert trainer._compute_advantage(batch, metrics=metrics) is batch
    assert calls == [1]
    assert metrics == batch_metrics(hand_batch(), algorithm_config("reward_budget"))


def test_trainer_hands_verl_the_base_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """verl's base class branches on ``trainer_mode == "sync"``: ours must look like sync."""
    pytest.importorskip("transfer_queue")
    from omegaconf import OmegaConf

    from advbudget.adapters.verl import register_trainers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_trainers()
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    seen = []
    monkeypatch.setattr(
        PPOTrainer, "__init__", lambda self, config: seen.append(config.trainer.v1.trainer_mode)
    )
    config = OmegaConf.create({"trainer": {"v1": {"trainer_mode": "advbudget_sync"}}})
    OmegaConf.set_struct(config, True)
    get_trainer_cls("advbudget_sync")(config)
    assert seen == ["sync"]


def _kappa_trainer(
    monkeypatch: pytest.MonkeyPatch, step: int, dp_size: int | None, **rollout: Any
) -> Any:
    """Our sync trainer after verl's update, TransferQueue faked by key: two groups of 4
    (a: o+ row 1, o- row 0; b: o+ row 4, o- row 6; rows 2, 3, 5, 7 are no pair) and one
    verl padding row; the worker group records what it is asked to forward."""
    from omegaconf import OmegaConf
    from tensordict import NonTensorStack, TensorDict
    from transfer_queue import KVBatchMeta

    from advbudget.adapters.verl import register_trainers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_trainers()
        import transfer_queue as tq
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    # Sequence log-prob changes: a's o+ +0.5, o- -0.5 (κ_eff 1); b's o+ +2, o- 0 (κ_eff 2).
    old = torch.tensor([[-1.0, -3.0], [-2.0, -3.0], [-1.0, -1.0], [-1.0, -1.0], [-3.0, 7.0],
                        [-1.0, 7.0], [-6.0, 7.0], [-1.0, 7.0], [-1.0, 0.0]])  # fmt: skip
    new = old.clone()
    new[0, 0], new[1, 0], new[4, 0] = -1.5, -1.5, -1.0
    mask = torch.tensor([[1, 1]] * 4 + [[1, 0]] * 4 + [[1, 0]])
    sequence = torch.tensor([-0.5, 0.5, 0.0, 0.0, 0.5, 0.0, -0.5, 0.0, 0.0])
    stored = TensorDict(
        {
            "old_log_probs": old,
            "log_probs": new,
            "advantages": sequence[:, None] * mask,
            "response_mask": mask,
            "uid": NonTensorStack.from_list(["a"] * 4 + ["b"] * 4 + ["pad"]),
        },
        batch_size=9,
    )
    keys = [f"k{i}" for i in range(9)]

    def kv_batch_get(keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
        assert partition_id == "train"
        return stored[torch.tensor([int(key[1:]) for key in keys])].select(*select_fields)

    class Workers:
        def __init__(self) -> None:
            self.passes: list[Any] = []
            if dp_size is not None:
                self._dispatch_info: dict[str, list[int]] = {}

        def _query_dispatch_info(self, mesh: str) -> list[int]:
            assert mesh == "actor"
            return list(range(dp_size or 1))

        def compute_log_prob(self, batch: Any) -> Any:
            self.passes.append(batch)
            return batch

    monkeypatch.setattr(PPOTrainerSync, "_update_actor", lambda self, batch, metrics: batch)
    monkeypatch.setattr(tq, "kv_batch_get", kv_batch_get)
    trainer = object.__new__(get_trainer_cls("advbudget_sync"))
    trainer.config = OmegaConf.create(
        {
            "algorithm": algorithm_config("reward_budget", kappa_every=2),
            "actor_rollout_ref": {"rollout": {"temperature": 1.0, **rollout}},
        }
    )
    trainer.actor_rollout_wg = Workers()
    trainer.global_steps = step
    tags = [{"is_padding": False}] * 8 + [{"is_padding": True}]
    return trainer, KVBatchMeta(keys=keys, tags=tags, partition_id="train")


@pytest.mark.parametrize(("step", "expected_passes"), [(4, 1), (3, 0)])
def test_trainer_kappa_eff_every_k_steps(
    monkeypatch: pytest.MonkeyPatch, step: int, expected_passes: int
) -> None:
    """After verl's actor update: one extra log-prob pass every ``kappa_every`` steps, over
    the pair rows only (2 of each group of 4), not the whole batch."""
    pytest.importorskip("transfer_queue")
    trainer, batch = _kappa_trainer(monkeypatch, step, dp_size=None)
    metrics: dict[str, float] = {}
    trainer._update_actor(batch, metrics=metrics)
    passes = trainer.actor_rollout_wg.passes
    assert len(passes) == expected_passes
    if expected_passes:
        assert passes[0].keys == ["k0", "k1", "k4", "k6"]
        assert passes[0].extra_info["compute_loss"] is False
        assert batch.extra_info == {}  # the step's batch is left alone
        assert metrics["advbudget/kappa_eff/mean"] == pytest.approx(1.5)
        assert metrics["advbudget/kappa_eff/min"] == pytest.approx(1.0)
        assert metrics["advbudget/kappa_eff/count"] == 2.0
    else:
        assert metrics == {}


def test_trainer_kappa_eff_pads_to_the_data_parallel_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 3 data-parallel ranks the 4 pair rows get 2 fillers, verl's padding row first."""
    pytest.importorskip("transfer_queue")
    trainer, batch = _kappa_trainer(monkeypatch, 4, dp_size=3)
    metrics: dict[str, float] = {}
    trainer._update_actor(batch, metrics=metrics)
    (forwarded,) = trainer.actor_rollout_wg.passes
    assert forwarded.keys == ["k0", "k1", "k4", "k6", "k8", "k2"]
    assert metrics["advbudget/kappa_eff/mean"] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("dp_size", "micro_batch", "dynamic", "expected"),
    [
        # fixed micro-batches of 2 on 1 rank: 4 pair rows already fit
        (None, 2, False, ["k0", "k1", "k4", "k6"]),
        # 1 rank x micro-batches of 3: 6 rows, verl's padding row first
        (None, 3, False, ["k0", "k1", "k4", "k6", "k8", "k2"]),
        # 2 ranks x micro-batches of 4: 8 rows (each rank's 4 are one micro-batch);
        # the lcm of 2 and 4 (4 rows) would give each rank 2, which verl refuses
        (2, 4, False, ["k0", "k1", "k4", "k6", "k8", "k2", "k3", "k5"]),
        # dynamic micro-batches: the micro-batch size is not used, 2 ranks want 4 rows
        (2, 8, True, ["k0", "k1", "k4", "k6"]),
    ],
)
def test_trainer_kappa_eff_pads_to_the_workers_micro_batches(
    monkeypatch: pytest.MonkeyPatch,
    dp_size: int | None,
    micro_batch: int,
    dynamic: bool,
    expected: list[str],
) -> None:
    """With fixed micro-batches (``log_prob_use_dynamic_bsz=False``) each data-parallel
    rank's share of the κ_eff rows must be a multiple of ``log_prob_micro_batch_size_per_gpu``
    (verl/workers/engine/utils.py:125 asserts it), i.e. the rows a multiple of dp x micro."""
    pytest.importorskip("transfer_queue")
    trainer, batch = _kappa_trainer(
        monkeypatch,
        4,
        dp_size=dp_size,
        log_prob_use_dynamic_bsz=dynamic,
        log_prob_micro_batch_size_per_gpu=micro_batch,
    )
    metrics: dict[str, float] = {}
    trainer._update_actor(batch, metrics=metrics)
    (forwarded,) = trainer.actor_rollout_wg.passes
    assert forwarded.keys == expected
    assert metrics["advbudget/kappa_eff/count"] == 2.0


def test_trainer_kappa_eff_says_why_when_the_batch_is_too_small_to_pad(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4 pair rows in micro-batches of 16 need 12 fillers; the batch has 5 other rows."""
    pytest.importorskip("transfer_queue")
    trainer, batch = _kappa_trainer(
        monkeypatch, 4, dp_size=None, log_prob_micro_batch_size_per_gpu=16
    )
    metrics: dict[str, float] = {}
    with pytest.warns(RuntimeWarning, match=r"κ_eff skipped at step 4: 4 pair rows need 12"):
        trainer._update_actor(batch, metrics=metrics)
    assert trainer.actor_rollout_wg.passes == []
    assert metrics == {}


@pytest.mark.parametrize(
    ("adv_estimator", "described_by"),
    [
        ("grpo", "advbudget_grpo"),
        ("grpo_vectorized", "advbudget_grpo"),
        ("opo", "advbudget_opo"),
        ("rloo_vectorized", "advbudget_rloo"),
        ("reward_budget", "reward_budget"),
        ("remax", None),  # needs reward_baselines, which the metrics do not fetch
        ("gae", None),
    ],
)
def test_which_estimator_describes_verls_own(adv_estimator: str, described_by: str | None) -> None:
    from advbudget.adapters.verl._metrics import metrics_estimator

    assert metrics_estimator({"adv_estimator": adv_estimator}) == described_by


@pytest.mark.parametrize("with_index", [True, False])
def test_trainer_keeps_the_prompt_ledger_across_a_checkpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, with_index: bool
) -> None:
    """The ledger's three metrics after two epochs of three prompts (a never solved, b
    always, c mixed), keyed by verl's dataset ``index`` or, without it, the prompt's token
    ids; saved beside verl's checkpoint and restored on resume (verl's own save and load
    need workers: they are replaced by what they do to the step counter)."""
    pytest.importorskip("transfer_queue")
    from omegaconf import OmegaConf
    from tensordict import NonTensorStack, TensorDict

    from advbudget.adapters.verl import register_trainers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_trainers()
        import transfer_queue as tq
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    uids = ["a", "a", "b", "b", "c", "c", "pad"]
    scores = [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    rows: dict[str, list[Any]] = {
        "rm_scores": [torch.tensor([0.0, s]) for s in scores],
        "response_mask": [torch.ones(2) for _ in scores],
        "prompts": [torch.tensor([7, ord(u[0]), 9][: 2 + (u == "c")]) for u in uids],
    }
    if with_index:
        rows["index"] = [torch.tensor(i) for i in [10, 10, 11, 11, 12, 12, 0]]

    def kv_batch_get(keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
        picked = [int(k[1:]) for k in keys]
        out: dict[str, Any] = {}
        for f in select_fields:
            if f == "uid":
                out[f] = NonTensorStack.from_list([uids[i] for i in picked])
            elif f == "index":
                out[f] = torch.stack([rows[f][i] for i in picked])
            else:
                out[f] = torch.nested.nested_tensor(
                    [rows[f][i] for i in picked], layout=torch.jagged
                )
        return TensorDict(out, batch_size=len(picked))

    monkeypatch.setattr(tq, "kv_batch_get", kv_batch_get)
    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", lambda self, batch, metrics: batch)
    monkeypatch.setattr(PPOTrainerSync, "_save_checkpoint", lambda self: None)
    monkeypatch.setattr(PPOTrainerSync, "_load_checkpoint", lambda self: None)
    config = OmegaConf.create(
        {
            "algorithm": algorithm_config("reward_budget"),
            "trainer": {"default_local_dir": str(tmp_path), "resume_mode": "auto"},
        }
    )

    def trainer() -> Any:
        made = object.__new__(get_trainer_cls("advbudget_sync"))
        made.config, made.global_steps = config, 0
        return made

    batch = FakeBatch([{"is_padding": False}] * 6 + [{"is_padding": True}])
    first = trainer()
    metrics: dict[str, float] = {}
    first._compute_advantage(batch, metrics=metrics)
    assert metrics["advbudget/recurring_prompts"] == 0
    assert "advbudget/never_solved_prompt_fraction" not in metrics  # NaN: left out
    first._compute_advantage(batch, metrics=metrics)
    assert metrics["advbudget/recurring_prompts"] == 3
    assert metrics["advbudget/never_solved_prompt_fraction"] == pytest.approx(1 / 3)
    assert metrics["advbudget/always_solved_prompt_fraction"] == pytest.approx(1 / 3)
    first.global_steps = 2
    first._save_checkpoint()
    saved = tmp_path / "global_step_2" / "advbudget_memory.json"
    assert json.loads(saved.read_text())["estimator_state"] is None  # budget: no memory

    resumed = trainer()
    monkeypatch.setattr(
        PPOTrainerSync, "_load_checkpoint", lambda self: setattr(self, "global_steps", 2)
    )
    resumed._load_checkpoint()
    ledger = first._advbudget_memory.ledger
    assert resumed._advbudget_memory.ledger.metrics() == ledger.metrics()
    # A checkpoint of an earlier version: the ledger alone, in its own file.
    saved.unlink()
    (saved.parent / "advbudget_ledger.json").write_text(json.dumps(ledger.state_dict()))
    older = trainer()
    older._load_checkpoint()
    assert older._advbudget_memory.ledger.metrics() == ledger.metrics()
    fresh = trainer()
    fresh._compute_advantage(batch, metrics=(after := {}))
    assert after["advbudget/recurring_prompts"] == 0  # without the resume: a new ledger


def test_rho_kl_is_spos_alone_in_verl() -> None:
    """spo's rho=kl is read (the trainer modes measure it: test_forgetting.py) and refused
    with any other estimator, ours or verl's own, in one line naming the key, as the
    trainer checks it before any model loads; a number is an ordinary option."""
    from advbudget.adapters._features import check_memory
    from advbudget.adapters.verl._options import key_of, read_options
    from advbudget.adapters.verl._trainer import _described_spec

    kl = read_options(algorithm_config("advbudget_spo", rho="kl"))
    assert kl.kl_rho
    assert "rho" not in kl.estimator_options  # measured each step, not a constant
    check_memory(_described_spec(algorithm_config("advbudget_spo")), kl, key_of)
    for estimator, what in (("advbudget_rae", "estimator 'rae'"), ("gae", "verl's own")):
        with pytest.raises(
            ValueError, match=rf"^algorithm\.advbudget\.rho: 'kl' is spo's .*{what}"
        ):
            check_memory(_described_spec(algorithm_config(estimator)), kl, key_of)
    assert read_options(algorithm_config("spo", rho=0.9)).estimator_options["rho"] == 0.9
