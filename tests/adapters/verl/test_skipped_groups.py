"""``+algorithm.advbudget.skipped_groups`` with verl: the options, and ``drop``'s gradient.

``drop`` is checked through verl's real actor loss (``verl.workers.utils.losses.ppo_loss``:
policy loss, entropy bonus and KL loss, each through ``agg_loss``) fed as verl's engine
feeds it: jagged mini-batches split in micro-batches whose losses are summed by backward,
``batch_num_tokens`` the mini-batch's ``loss_mask`` sum, ``global_batch_size`` the
trainer's constant row count (keep) or what our wrapper of ``TrainingWorker.train_batch``
puts there (drop). The model is a float64 linear map, so the gradients compare to rounding.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from advbudget.testing import rounding_tolerance

from .conftest import VERL_WARNINGS

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

pytestmark = VERL_WARNINGS

MODES = ["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum"]
DIM = 5


def _rows() -> list[dict[str, Any]]:
    """Three groups of 4 (a: graded rewards, b: a tie within 1e-6, skipped; c: 0/1) and a
    group of 3 with a NaN reward (left out by nan_policy=omit). Each row: prompt and
    response length, fixed features; the skipped rows are the longest responses."""
    rng = np.random.default_rng(7)
    rewards = [0.2, 0.9, 0.5, 0.5, 1.0, 1.0 + 1e-9, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    rewards += [1.0, float("nan"), 0.0]
    uids = ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 3
    rows = []
    for i, (reward, uid) in enumerate(zip(rewards, uids, strict=True)):
        long = uid == "b" or np.isnan(reward)
        prompt, response = int(rng.integers(1, 4)), 7 if long else int(rng.integers(1, 5))
        rows.append(
            {
                "uid": uid,
                "reward": reward,
                "prompt": prompt,
                "response": response,
                "features": torch.from_numpy(rng.normal(size=(prompt + response, 2, DIM))),
                "old": torch.from_numpy(rng.normal(-1.0, 0.1, size=response)),
                "ref": torch.from_numpy(rng.normal(-1.0, 0.1, size=response)),
                "index": i,
            }
        )
    return rows


def _advantages(rows: list[dict[str, Any]]) -> tuple[list[float], list[bool]]:
    from advbudget.adapters.verl import compute_result

    rewards = torch.tensor([[r["reward"]] for r in rows], dtype=torch.float64)
    uids = np.array([r["uid"] for r in rows], dtype=object)
    config = {"advbudget": {"nan_policy": "omit"}}
    result = compute_result("reward_budget", rewards, uids, config)
    return result.advantages.tolist(), result.valid.tolist()


def _jagged(tensors: list[Any]) -> Any:
    return torch.nested.nested_tensor(tensors, layout=torch.jagged)


def _micro_batch(rows: list[dict[str, Any]], advantages: list[float], masked: set[int]) -> Any:
    """A micro-batch as verl's engine hands it to the loss: jagged fields; ``masked`` rows
    (by ``index``) with an all-zero ``response_mask`` and ``loss_mask``, as drop leaves them."""
    from tensordict import TensorDict

    masks = [
        torch.zeros(r["response"]) if r["index"] in masked else torch.ones(r["response"])
        for r in rows
    ]
    fields = {
        "prompts": _jagged([torch.ones(r["prompt"], dtype=torch.int64) for r in rows]),
        "responses": _jagged([torch.ones(r["response"], dtype=torch.int64) for r in rows]),
        "response_mask": _jagged(masks),
        "loss_mask": _jagged([m.clone() for m in masks]),
        "old_log_probs": _jagged([r["old"] for r in rows]),
        "ref_log_prob": _jagged([r["ref"] for r in rows]),
        "advantages": _jagged(
            [
                torch.full((r["response"],), advantages[r["index"]], dtype=torch.float64)
                for r in rows
            ]
        ),
    }
    return TensorDict(fields, batch_size=len(rows))


def _actor_config(mode: str, loss_scale_factor: int | None = None) -> Any:
    from verl.utils.config import omega_conf_to_dataclass

    from advbudget.adapters.verl.check_config import compose_config

    overrides = [
        f"actor_rollout_ref.actor.loss_agg_mode={mode}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.3",
        "actor_rollout_ref.actor.entropy_coeff=0.05",
    ]
    if loss_scale_factor is not None:
        overrides.append(f"actor_rollout_ref.actor.loss_scale_factor={loss_scale_factor}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return omega_conf_to_dataclass(compose_config(overrides).actor_rollout_ref.actor)


def _gradient(
    config: Any,
    ranks: list[list[list[dict[str, Any]]]],
    advantages: list[float],
    *,
    masked: set[int] = frozenset(),  # type: ignore[assignment]
    drop: bool = False,
) -> Any:
    """The gradient of one update over ``ranks`` (each a list of micro-batches of rows):
    verl's ``ppo_loss`` per micro-batch, summed (backward) per rank, averaged over ranks
    (data-parallel all-reduce)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    from advbudget.adapters.verl._skipped import DROP_FLAG, kept_row_count, with_kept_row_count

    theta = torch.linspace(-0.3, 0.4, DIM, dtype=torch.float64).requires_grad_()
    mini_batches = [
        _micro_batch([r for mb in rank for r in mb], advantages, masked) for rank in ranks
    ]
    tokens = sum(int(mb["loss_mask"].values().sum()) for mb in mini_batches)
    rows = sum(len(mb) for mb in mini_batches)
    if drop:
        # What the wrapper puts in each rank's mini-batch (here: its local count, then the
        # sum its all-reduce takes over the ranks).
        seen: list[int] = []
        wrapped = with_kept_row_count(lambda worker, data: seen.append(data["global_batch_size"]))
        for mb in mini_batches:
            tu.assign_non_tensor(mb, **{DROP_FLAG: "drop", "global_batch_size": rows})
            wrapped(None, mb)
        assert seen == [int(kept_row_count(mb["loss_mask"])) for mb in mini_batches]
        rows = sum(seen)
    total = torch.zeros(DIM, dtype=torch.float64)
    for rank in ranks:
        for micro in rank:
            data = _micro_batch(micro, advantages, masked)
            tu.assign_non_tensor(
                data, dp_size=len(ranks), batch_num_tokens=tokens, global_batch_size=rows
            )
            features = torch.cat([r["features"] for r in micro])
            outputs = features @ theta
            model_output = {
                "log_probs": -torch.nn.functional.softplus(outputs[:, 0]),
                "entropy": torch.nn.functional.softplus(outputs[:, 1]),
            }
            loss, _ = ppo_loss(config, model_output, data)
            (gradient,) = torch.autograd.grad(loss, theta)
            total += gradient
    return total / len(ranks)


def _sum_rounding(gradient: Any, rows: list[dict[str, Any]]) -> float:
    """The tolerance of two float64 gradients equal in exact arithmetic: each sums every
    token's term over the batch (their order follows the micro-batches and the CPU)."""
    return rounding_tolerance(gradient, terms=sum(r["prompt"] + r["response"] for r in rows))


def _split(rows: list[dict[str, Any]], ranks: int, micro: int) -> list[list[list[dict[str, Any]]]]:
    shares = [rows[r::ranks] for r in range(ranks)]
    return [[share[i : i + micro] for i in range(0, len(share), micro)] for share in shares]


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_drop_equals_the_batch_of_kept_groups(mode: str, ranks: int) -> None:
    """One update with drop has the gradient of the same update on the kept rows alone
    (policy loss, entropy bonus and KL loss together), to float64 rounding; keep does not."""
    rows = _rows()
    advantages, valid = _advantages(rows)
    assert valid == [True] * 4 + [False] * 4 + [True] * 4 + [True, False, True]
    skipped = {r["index"] for r, ok in zip(rows, valid, strict=True) if not ok}
    kept = [r for r in rows if r["index"] not in skipped]
    config = _actor_config(mode)
    drop = _gradient(config, _split(rows, ranks, 3), advantages, masked=skipped, drop=True)
    reference = _gradient(config, _split(kept, ranks, 2), advantages)
    tolerance = _sum_rounding(reference, rows)
    torch.testing.assert_close(drop, reference, rtol=0, atol=tolerance)
    keep = _gradient(config, _split(rows, ranks, 3), advantages)
    assert (keep - reference).abs().max() > 1000 * tolerance


def test_seq_mean_token_sum_norm_keeps_its_constant() -> None:
    """seq-mean-token-sum-norm: drop takes the skipped rows out of the sum and the row
    count; the token normaliser stays verl's constant. With actor.loss_scale_factor that is
    the kept-only gradient; without, the padded response length, which the skipped (here
    the longest) rows still set: the kept-only gradient times its length over theirs."""
    rows = _rows()
    advantages, valid = _advantages(rows)
    skipped = {r["index"] for r, ok in zip(rows, valid, strict=True) if not ok}
    kept = [r for r in rows if r["index"] not in skipped]
    one_micro_batch = _split(rows, 1, len(rows))
    config = _actor_config("seq-mean-token-sum-norm", loss_scale_factor=16)
    drop = _gradient(config, one_micro_batch, advantages, masked=skipped, drop=True)
    reference = _gradient(config, _split(kept, 1, len(kept)), advantages)
    torch.testing.assert_close(drop, reference, rtol=0, atol=_sum_rounding(reference, rows))

    config = _actor_config("seq-mean-token-sum-norm")
    drop = _gradient(config, one_micro_batch, advantages, masked=skipped, drop=True)
    reference = _gradient(config, _split(kept, 1, len(kept)), advantages)
    longest_kept = max(r["response"] for r in kept)
    assert longest_kept < 7
    expected = reference * longest_kept / 7
    torch.testing.assert_close(drop, expected, rtol=0, atol=_sum_rounding(expected, rows))


def test_wrapper_leaves_other_batches_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the adapter leaves verl's TrainingWorker as it is; installed (as drop's
    workers do), the wrapper is installed once and passes a batch without drop's flag to
    verl's train_batch untouched."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import TrainingWorker

    import advbudget.adapters.verl  # noqa: F401 (registers, patches nothing)
    from advbudget.adapters.verl._hooks import KEPT_ROWS_ENV, install_requested
    from advbudget.adapters.verl._skipped import with_kept_row_count

    verls = TrainingWorker.train_batch
    assert not hasattr(verls, "_advbudget_kept_rows")
    monkeypatch.setattr(TrainingWorker, "train_batch", verls)  # put back after the test
    monkeypatch.delenv(KEPT_ROWS_ENV, raising=False)
    assert not install_requested()
    assert TrainingWorker.train_batch is verls
    monkeypatch.setenv(KEPT_ROWS_ENV, "1")
    assert install_requested()
    wrapped = TrainingWorker.train_batch
    assert wrapped._advbudget_kept_rows
    assert wrapped.__wrapped__ is verls
    assert install_requested()
    assert TrainingWorker.train_batch is wrapped  # once
    data = _micro_batch(_rows()[:4], [0.0] * 4, masked={0, 1})
    tu.assign_non_tensor(data, global_batch_size=4)
    seen: list[int] = []
    with_kept_row_count(lambda worker, d: seen.append(d["global_batch_size"]))(None, data)
    assert seen == [4]


def test_kept_row_count_padded_and_jagged() -> None:
    from advbudget.adapters.verl._skipped import kept_row_count

    padded = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    assert int(kept_row_count(padded)) == 2
    assert int(kept_row_count(_jagged([torch.ones(2), torch.zeros(3), torch.ones(1)]))) == 2


# ---------------------------------------------------------------- options, before verl starts


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        (
            ["+algorithm.advbudget.skipped_groups=skip"],
            "algorithm.advbudget.skipped_groups: expected one of keep, drop, resample, got 'skip'",
        ),
        (
            ["+algorithm.advbudget.skipped_groups=resample", "trainer.v1.trainer_mode=sync"],
            "algorithm.advbudget.skipped_groups: 'resample' needs trainer.use_v1=true and "
            "trainer.v1.trainer_mode=advbudget_sync, got trainer mode 'sync'",
        ),
        (
            [
                "+algorithm.advbudget.skipped_groups=resample",
                "trainer.v1.trainer_mode=advbudget_separate_async",
            ],
            "algorithm.advbudget.skipped_groups: 'resample' is not available with trainer mode "
            "'advbudget_separate_async': resample replaces verl 0.9.1's sync replay buffer",
        ),
        (
            [
                "+algorithm.advbudget.skipped_groups=resample",
                "algorithm.filter_groups.enable=true",
            ],
            "algorithm.advbudget.skipped_groups: 'resample' is advbudget's DAPO filter, got "
            "verl's algorithm.filter_groups.enable=true as well: leave verl's off",
        ),
        (
            ["+algorithm.advbudget.max_generation_batches=0"],
            "algorithm.advbudget.max_generation_batches: expected an int >= 1, got 0",
        ),
        (
            ["+algorithm.advbudget.skipped_groups=drop", "trainer.v1.trainer_mode=sync"],
            "algorithm.advbudget.skipped_groups: 'drop' needs trainer.use_v1=true and "
            "trainer.v1.trainer_mode=advbudget_sync",
        ),
        (
            ["+algorithm.advbudget.skipped_groups=drop", "algorithm.adv_estimator=gae"],
            "algorithm.advbudget.skipped_groups: 'drop' needs a group estimator advbudget "
            "describes (reward_budget, advbudget_*, grpo, rloo, ...), got adv_estimator='gae'",
        ),
    ],
)
def test_check_config_refuses_in_one_line(
    overrides: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check_config`` (and ``examples/verl_qwen3.sh --dry-run``) fails in one line naming
    the option, what it takes and what it got."""
    from advbudget.adapters.verl.check_config import main

    base = [
        "algorithm.adv_estimator=reward_budget",
        "trainer.use_v1=true",
        "trainer.v1.trainer_mode=advbudget_sync",
        "actor_rollout_ref.rollout.n=4",
    ]
    assert main([*base, *overrides]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"invalid verl config: ValueError: {error}")


@pytest.mark.parametrize(
    ("mode", "choice"),
    [
        ("advbudget_sync", "drop"),
        ("advbudget_colocate_async", "drop"),
        ("advbudget_sync", "resample"),
    ],
)
def test_check_config_takes_drop_and_resample_with_our_trainers(
    mode: str, choice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from advbudget.adapters.verl.check_config import main

    args = [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
        "actor_rollout_ref.rollout.n=4",
        "trainer.use_v1=true",
        f"trainer.v1.trainer_mode={mode}",
        f"+algorithm.advbudget.skipped_groups={choice}",
        "+algorithm.advbudget.max_generation_batches=3",
    ]
    assert main(args) == 0
    assert capsys.readouterr().out.strip().endswith("ok")


def _trainer_class() -> Any:
    pytest.importorskip("transfer_queue")
    from advbudget.adapters.verl import register_trainers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_trainers()
        from verl.trainer.ppo.v1 import get_trainer_cls
    return get_trainer_cls("advbudget_sync")


def test_trainer_checks_the_options_before_verl_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad options fail in our trainer's ``__init__`` before verl's (which loads the
    models); drop says at start-up, in one line, what it does to the configured loss."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    trainer_class = _trainer_class()
    started = []
    monkeypatch.setattr(PPOTrainer, "__init__", lambda self, config: started.append(1))

    def config(**advbudget: Any) -> Any:
        return OmegaConf.create(
            {
                "trainer": {"v1": {"trainer_mode": "advbudget_sync"}},
                "algorithm": {"adv_estimator": "reward_budget", "advbudget": advbudget},
                "actor_rollout_ref": {
                    "actor": {"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": None}
                },
            }
        )

    for bad in ({"skipped_groups": "all"}, {"skipped_groups": 1}):
        with pytest.raises(ValueError, match=r"^algorithm\.advbudget\.skipped_groups: "):
            trainer_class(config(**bad))
    with pytest.raises(ValueError, match=r"^algorithm\.advbudget\.max_generation_batches: "):
        trainer_class(config(max_generation_batches=-2))
    assert started == []
    assert trainer_class(config())._advbudget_skipped_groups == "keep"
    trainer = trainer_class(config(skipped_groups="drop"))
    assert trainer._advbudget_skipped_groups == "drop"
    assert started == [1, 1]
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("advbudget: skipped_groups=drop, loss_agg_mode=seq-mean-token-sum-norm")
    assert "padded response length" in line


def test_drop_zeroes_the_masks_for_the_actor_update_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """On verl's real sync trainer, TransferQueue faked by key: the skipped rows (a tied
    group, a NaN reward under nan_policy=omit) have zero ``response_mask`` and
    ``loss_mask`` and the batch carries drop's flag during verl's actor update, and get
    their masks back after it; verl's padding row is left alone."""
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from tensordict import NonTensorStack, TensorDict
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from advbudget.adapters.verl._skipped import DROP_FLAG

    trainer_class = _trainer_class()
    uids = ["a", "a", "b", "b", "c", "c", "c", "pad"]
    scores = [1.0, 0.0, 1.0, 1.0, 1.0, float("nan"), 0.0, 0.0]
    lengths = [2, 3, 1, 2, 3, 2, 1, 1]
    store = {
        f"k{i}": {
            "uid": uids[i],
            "rm_scores": torch.tensor([0.0] * (n - 1) + [scores[i]]),
            "response_mask": torch.ones(n),
            "loss_mask": torch.ones(n),
        }
        for i, n in enumerate(lengths)
    }

    def kv_batch_get(keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
        out = {}
        for field in select_fields:
            values = [store[k][field] for k in keys]
            out[field] = (
                NonTensorStack.from_list(values)
                if field == "uid"
                else torch.nested.nested_tensor(values, layout=torch.jagged)
            )
        return TensorDict(out, batch_size=len(keys))

    def kv_batch_put(keys: list[str], partition_id: str, fields: Any) -> None:
        for field, value in fields.items():
            for key, row in zip(keys, value.unbind(), strict=True):
                store[key][field] = row.clone()

    seen: dict[str, Any] = {}

    def update(self: Any, batch: Any, metrics: dict[str, Any]) -> Any:
        seen["flag"] = batch.extra_info.get(DROP_FLAG)
        seen["masks"] = {
            k: (store[k]["response_mask"].sum(), store[k]["loss_mask"].sum()) for k in store
        }
        return batch

    monkeypatch.setattr(tq, "kv_batch_get", kv_batch_get)
    monkeypatch.setattr(tq, "kv_batch_put", kv_batch_put)
    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", lambda self, batch, metrics: batch)
    monkeypatch.setattr(PPOTrainerSync, "_update_actor", update)
    trainer = object.__new__(trainer_class)
    trainer._advbudget_skipped_groups = "drop"
    trainer.global_steps = 1
    trainer.config = OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": "reward_budget",
                "advbudget": {"nan_policy": "omit", "kappa_every": 0},
            }
        }
    )

    class Batch:
        def __init__(self) -> None:
            self.keys = list(store)
            self.partition_id = "train"
            self.tags = [{"is_padding": False}] * 7 + [{"is_padding": True}]
            self.extra_info: dict[str, Any] = {}

    batch, metrics = Batch(), {}
    trainer._compute_advantage(batch, metrics=metrics)
    # What drop leaves out is what advbudget/valid_fraction does not count.
    assert metrics["advbudget/valid_fraction"] == pytest.approx(4 / 7)
    trainer._update_actor(batch, metrics=metrics)
    assert seen["flag"] == "drop"
    assert metrics["advbudget/actor_update_skipped"] == 0
    empty = {"k2", "k3", "k5"}  # b tied, c's NaN
    assert {k for k, (r, lo) in seen["masks"].items() if r == 0 and lo == 0} == empty
    assert all(r > 0 and lo > 0 for k, (r, lo) in seen["masks"].items() if k not in empty)
    assert all(store[k]["response_mask"].sum() == lengths[i] for i, k in enumerate(store))
    assert all(store[k]["loss_mask"].sum() == lengths[i] for i, k in enumerate(store))
    assert DROP_FLAG not in batch.extra_info
    trainer._update_actor(batch, metrics=metrics)  # the next step without a new advantage
    assert seen["flag"] == "drop"
    assert all(r > 0 and lo > 0 for r, lo in seen["masks"].values())

    # Every group skipped: verl's update does not run at all.
    for key in store:
        store[key]["rm_scores"] = torch.zeros_like(store[key]["rm_scores"])
    seen.clear()
    trainer._compute_advantage(batch, metrics=metrics)
    trainer._update_actor(batch, metrics=metrics)
    assert seen == {}
    assert metrics["advbudget/actor_update_skipped"] == 1
    assert all(store[k]["loss_mask"].sum() == lengths[i] for i, k in enumerate(store))


# ---------------------------------------------------------------- resample: why it is refused


def test_verls_group_filter_is_not_the_skip_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """verl 0.9.1's DAPO filter (V1 ``ReplayBuffer`` with ``algorithm.filter_groups``,
    metric ``reward``) against the core's skip rule, group by group: they agree on 0/1,
    ±1 and distinct graded rewards, and differ on a tie within the tolerance, a group of
    one and a NaN reward (verl keeps all three, the estimator skips them). Why resample
    brings its own rule; this test says when verl's changes. Ours follows the core."""
    pytest.importorskip("transfer_queue")
    import transfer_queue as tq

    from advbudget.adapters.verl import compute_result

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    groups = {
        "binary": [0.0, 1.0, 0.0, 1.0],
        "allright": [1.0, 1.0, 1.0, 1.0],
        "allwrong": [-1.0, -1.0, -1.0, -1.0],
        "graded": [0.3, 0.7, 0.5, 0.5],
        "neartie": [0.5, 0.5 + 5e-7, 0.5, 0.5],  # apart in float32 (verl's rm_scores)
        "single": [1.0],
        "nan": [1.0, float("nan"), 1.0, 1.0],
    }
    # verl's keys {uid}_{session_id}_{index}: a group's rollouts are its sessions
    rewards = {f"{uid}_{i}_0": r for uid, values in groups.items() for i, r in enumerate(values)}
    monkeypatch.setattr(
        tq,
        "kv_batch_get",
        lambda keys, partition_id, select_fields: {
            "rm_scores": [torch.tensor([0.0, rewards[k]]) for k in keys]
        },
    )
    buffer = ReplayBuffer(
        "sync",
        {},
        None,
        "drop",
        {},
        refill_fn=lambda count: None,
        filter_groups_metric="reward",
        train_batch_size=len(groups),
        gen_batch_size=1,
    )
    buffer.partitions["train"] = {key: {} for key in rewards}
    buffer.finished_keys["train"] = set(groups)
    verl_filtered, _ = buffer._dapo_filtered_keys("train")

    uids = np.array([key.split("_")[0] for key in rewards], dtype=object)
    scores = torch.tensor([[r] for r in rewards.values()], dtype=torch.float32)
    result = compute_result("reward_budget", scores, uids, {"advbudget": {"nan_policy": "omit"}})
    group_skipped = result.group_skipped.tolist()
    skipped = {
        u for u, g in zip(uids, result.group_index.tolist(), strict=True) if group_skipped[g]
    }

    assert verl_filtered == {"allright", "allwrong"}
    assert skipped == {"allright", "allwrong", "neartie", "single", "nan"}

    ours = _sampler(train_batch_size=len(groups))
    ours.partitions["train"] = {key: {} for key in rewards}
    ours.finished_keys["train"] = set(groups)
    filtered, counts = ours._dapo_filtered_keys("train")
    assert filtered == skipped
    assert counts == {1.0: 3, -1.0: 1, 0.5: 1}  # each evicted group's first reward


def _sampler(train_batch_size: int, max_generation_batches: int = 10, **algorithm: Any) -> Any:
    """Our sampler as verl's trainer builds a custom one (``_build_replay_buffer``)."""
    from advbudget.adapters.verl import _resample

    settings = {
        "estimator": "reward_budget",
        "algorithm": {"advbudget": {"nan_policy": "omit", **algorithm}},
        "train_batch_size": train_batch_size,
        "max_generation_batches": max_generation_batches,
    }
    refills: list[int] = []
    sampler = _resample.SkipRuleReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={"advbudget": settings},
        refill_fn=refills.append,
    )
    sampler.refills = refills
    return sampler


def test_resample_maps_onto_verls_trainer_and_replay_buffer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The composed verl config with resample passes our check and verl's validation; our
    trainer points it at our sampler, which verl's own ``_build_replay_buffer`` then builds
    with its DAPO gating on and our settings."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from advbudget.adapters.verl.check_config import compose_config, validate

    trainer_class = _trainer_class()
    config = compose_config(
        [
            "algorithm.adv_estimator=reward_budget",
            "trainer.use_v1=true",
            "trainer.v1.trainer_mode=advbudget_sync",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.n=4",
            "data.train_batch_size=6",
            "+algorithm.advbudget.skipped_groups=resample",
            "+algorithm.advbudget.max_generation_batches=3",
            "+algorithm.advbudget.tie_atol=0.01",
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        validate(config)
    seen = []
    monkeypatch.setattr(PPOTrainer, "__init__", lambda self, config: seen.append(config))
    trainer = trainer_class(config)
    assert "at most 3 generation rounds a step" in capsys.readouterr().out
    (mapped,) = seen
    assert (
        mapped.trainer.v1.sampler.custom_sampler.path == "pkg://advbudget.adapters.verl._resample"
    )
    trainer.config, trainer.trainer_mode = mapped, "sync"
    trainer._add_prompts_to_generate = lambda count: count
    buffer = trainer._build_replay_buffer()
    assert isinstance(buffer, ReplayBuffer)
    assert buffer.filter_groups_metric == "reward"
    assert (buffer.train_batch_size, buffer.gen_batch_size) == (6, 1)
    settings = buffer._advbudget
    assert settings["max_generation_batches"] == 3
    assert settings["algorithm"]["advbudget"]["tie_atol"] == 0.01

    # A refill of one prompt (one dead group) through verl's own fetch: with the
    # dataloader's default chunk (train_batch_size) it raised "num_prompts (1) must be a
    # positive multiple of gen_batch_size (6)" and the run died.
    assert mapped.data.gen_batch_size == 1
    from verl.utils import tensordict_utils as tu

    trainer.global_steps = 1
    trainer._fetch_one_gen_batch = lambda: tu.get_tensordict({"x": torch.zeros(1, 2)})
    for count in (1, 5):
        assert len(trainer._next_train_batch(count)) == count


def test_resample_overrides_another_gen_batch_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from advbudget.adapters.verl.check_config import compose_config

    config = compose_config(
        [
            "algorithm.adv_estimator=reward_budget",
            "trainer.use_v1=true",
            "trainer.v1.trainer_mode=advbudget_sync",
            "data.train_batch_size=6",
            "+data.gen_batch_size=3",
            "+algorithm.advbudget.skipped_groups=resample",
        ]
    )
    seen = []
    monkeypatch.setattr(PPOTrainer, "__init__", lambda self, config: seen.append(config))
    with pytest.warns(UserWarning, match=r"data\.gen_batch_size=3 is overridden to 1"):
        _trainer_class()(config)
    assert seen[0].data.gen_batch_size == 1


def test_resample_caps_the_rounds_and_logs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refills count as generation; once the step's prompts reach max_generation_batches
    train batches nothing more is evicted, and the step says how many skipped groups it
    trains on. ``advbudget/generation_batches``: 1 + refilled prompts / batch, rounded up."""
    pytest.importorskip("transfer_queue")
    import transfer_queue as tq
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    rewards = {"a_0_0": 1.0, "a_1_0": 1.0, "b_0_0": 0.0, "b_1_0": 1.0}  # 2 sessions each
    monkeypatch.setattr(
        tq,
        "kv_batch_get",
        lambda keys, partition_id, select_fields: {
            "rm_scores": [torch.tensor([rewards[k]]) for k in keys]
        },
    )
    sampler = _sampler(train_batch_size=2, max_generation_batches=2)
    sampler.partitions["train"] = {key: {} for key in rewards}
    sampler.finished_keys["train"] = {"a", "b"}
    assert sampler._dapo_filtered_keys("train")[0] == {"a"}  # round 1: a is replaced
    sampler.refill_fn(1)
    assert sampler.refills == [1]
    assert sampler._dapo_filtered_keys("train")[0] == {"a"}
    sampler.refill_fn(1)  # 2 prompts refilled: round 2 of 2
    assert sampler._dapo_filtered_keys("train") == (set(), {})
    assert sampler._capped

    class Batch:
        keys = ["a_0_0", "a_1_0", "b_0_0", "b_1_0"]  # noqa: RUF012

    def verl_sample(self: Any, global_steps: int, partition_id: str, batch_size: int) -> Any:
        self.refill_fn(3)  # what verl's loop refills while groups are evicted
        self._dapo_filtered_keys(partition_id)
        return Batch(), {"train/filter_groups/evicted_samples": 2}

    monkeypatch.setattr(ReplayBuffer, "sample", verl_sample)
    with pytest.warns(
        RuntimeWarning, match=r"step 7 reached max_generation_batches=2 \(3 rounds\): 1 of 2 groups"
    ):
        _, metrics = sampler.sample(7, "train", 2)
    assert metrics["advbudget/generation_batches"] == 3.0
    assert metrics["advbudget/refilled_prompts"] == 3.0
    assert metrics["train/filter_groups/evicted_samples"] == 2


def test_after_the_cap_kept_groups_are_taken_first() -> None:
    """Past the cap the skipped groups are sampleable; verl's selection (oldest first) gets
    the kept ones first while there are enough, and all of them otherwise."""
    pytest.importorskip("transfer_queue")
    sampler = _sampler(train_batch_size=2)
    cache = sampler._dapo_classification_cache["train"]
    cache.update({"dead": 1.0, "x": None, "y": None})
    sampler.prompt_global_steps["train"].update({"dead": 0, "x": 1, "y": 2})
    sampleable = {"dead", "x", "y"}
    assert sampler._select_prompt_uids("train", sampleable, 2)[0] == ["dead", "x"]  # not capped
    sampler._capped = True
    assert sorted(sampler._select_prompt_uids("train", sampleable, 2)[0]) == ["x", "y"]
    assert sampler._select_prompt_uids("train", sampleable, 3)[0][0] == "dead"
