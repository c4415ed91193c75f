"""The advbudget trainer's step around SkyRL's own ``RayPPOTrainer.compute_advantages_and_returns``
(SkyRL's code runs; the trainer is built without its Ray workers): the same numbers as
SkyRL's for a mirror, padding rows left out, step-wise trajectories, the metrics in SkyRL's
logged dict, drop's loss mask, the ledger and memory, the config and its refusals."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

pytest.importorskip("skyrl")

import torch

from advbudget import compute_advantages
from advbudget.adapters._features import RunMemory
from advbudget.adapters.skyrl._trainer import (
    MEMORY_FILE,
    AdvBudgetPPOTrainer,
    MemoryCallback,
    check_run,
    parse_config,
)
from advbudget.metrics import advantage_metric_dict

from .conftest import SKYRL_WARNINGS

pytestmark = SKYRL_WARNINGS
MIRRORED = [("grpo", "advbudget_grpo"), ("rloo", "advbudget_rloo")]
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 1.0, 0.25]
G = 4


def _trainer(*overrides: str) -> Any:
    from skyrl.train.trainer import RayPPOTrainer

    cfg = parse_config(list(overrides))
    trainer = AdvBudgetPPOTrainer.__new__(AdvBudgetPPOTrainer)
    trainer.cfg = cfg
    trainer.all_metrics = {}
    trainer.start_advbudget()
    assert isinstance(trainer, RayPPOTrainer)
    return trainer


def _batch(rewards: list[float], pad: int = 0, uids: list[str] | None = None) -> Any:
    """SkyRL's training batch as its trainer hands it to the advantage step: per-token
    rewards on the last token, masks, uids, then SkyRL's own padding of ``pad`` rows."""
    from skyrl.backends.skyrl_train.training_batch import (
        TrainingInputBatch,
        pad_training_input_batch,
    )

    rows, length = len(rewards), 3
    tokens = torch.zeros(rows, length)
    tokens[:, -1] = torch.tensor(rewards)
    mask = torch.ones(rows, length, dtype=torch.long)
    batch = TrainingInputBatch(
        {"rewards": tokens, "response_mask": mask, "loss_mask": mask.clone(), "values": None}
    )
    batch.metadata = {
        "uids": uids or [str(row // G) for row in range(rows)],
        "avg_response_length": float(length),
        "response_length": length,
    }
    return pad_training_input_batch(batch, pad)


def _advantages(trainer: Any, batch: Any) -> np.ndarray:
    out = trainer.compute_advantages_and_returns(batch)
    return np.asarray(out["advantages"][:, -1], dtype=np.float64)


@pytest.mark.parametrize(("skyrl", "ours"), MIRRORED)
@pytest.mark.parametrize("pad", [0, 3])
def test_a_mirror_in_the_trainer_gives_skyrls_numbers(skyrl: str, ours: str, pad: int) -> None:
    theirs = _trainer(f"trainer.algorithm.advantage_estimator={skyrl}")
    mine = _trainer(f"trainer.algorithm.advantage_estimator={ours}")
    expected = _advantages(theirs, _batch(REWARDS, pad))
    got = _advantages(mine, _batch(REWARDS, pad))
    real = len(REWARDS)
    np.testing.assert_allclose(got[:real], expected[:real], rtol=0, atol=1e-6)
    assert np.all(got[real:] == 0)  # padding: out of the groups (SkyRL scores it raw)
    assert "advbudget/skipped_group_fraction" in mine.all_metrics
    assert "advbudget/skipped_group_fraction" not in theirs.all_metrics
    assert mine.all_metrics["loss/avg_raw_advantages"] == pytest.approx(
        theirs.all_metrics["loss/avg_raw_advantages"], abs=1e-6
    )


def test_the_metrics_count_the_real_rows_only() -> None:
    """Three padding rows (groups of one to SkyRL) are not three skipped groups."""
    trainer = _trainer("trainer.algorithm.advantage_estimator=reward_budget")
    got = _advantages(trainer, _batch(REWARDS, pad=3))
    expected = compute_advantages(np.asarray(REWARDS), "budget", group_size=G)
    np.testing.assert_allclose(got[: len(REWARDS)], np.asarray(expected.advantages), atol=1e-6)
    metrics = advantage_metric_dict(expected, "advbudget/", solved_reward=1.0)
    for key in ("advbudget/skipped_group_fraction", "advbudget/advantage_mean"):
        assert trainer.all_metrics[key] == pytest.approx(metrics[key], abs=1e-9)
    assert trainer.all_metrics["advbudget/skipped_group_fraction"] == pytest.approx(1 / 3)
    assert trainer.all_metrics["advbudget/recurring_prompts"] == 0
    _advantages(trainer, _batch(REWARDS, pad=3))  # the same prompts again: 3, no padding
    assert trainer.all_metrics["advbudget/recurring_prompts"] == 3


def test_drop_zeroes_the_loss_mask_of_skipped_groups() -> None:
    trainer = _trainer(
        "trainer.algorithm.advantage_estimator=reward_budget",
        "trainer.algorithm.advbudget.skipped_groups=drop",
    )
    out = trainer.compute_advantages_and_returns(_batch(REWARDS, pad=1))
    kept_rows = out["loss_mask"].sum(-1) > 0
    assert kept_rows.tolist() == [True] * 4 + [False] * 4 + [True] * 4 + [False]
    keep = _trainer("trainer.algorithm.advantage_estimator=reward_budget")
    out = keep.compute_advantages_and_returns(_batch(REWARDS, pad=1))
    assert (out["loss_mask"].sum(-1) > 0).tolist() == [True] * 12 + [False]


def test_step_wise_trajectories_are_scored_once_and_dropped_whole() -> None:
    """SkyRL scores each trajectory's last step and broadcasts to its steps; drop zeroes
    every step of a skipped trajectory."""
    from skyrl.backends.skyrl_train.training_batch import pad_training_input_batch

    trainer = _trainer(
        "trainer.algorithm.advantage_estimator=reward_budget",
        "generator.step_wise_trajectories=true",
        "trainer.algorithm.advbudget.skipped_groups=drop",
    )
    # 2 prompts x 2 trajectories; trajectory lengths 2, 1, 1, 2 steps (rows)
    steps = [2, 1, 1, 2]
    finals = [1.0, 0.0, 1.0, 1.0]  # prompt "1" ties: skipped, dropped
    rewards, uids, last = [], [], []
    for trajectory, (count, final) in enumerate(zip(steps, finals, strict=True)):
        for step in range(count):
            rewards.append(final if step == count - 1 else 0.3)
            uids.append(str(trajectory // 2))
            last.append(step == count - 1)
    batch = _batch(rewards, uids=uids)
    batch.metadata["is_last_step"] = last
    batch = pad_training_input_batch(batch, 2)
    out = trainer.compute_advantages_and_returns(batch)
    advantages = out["advantages"][:, -1].tolist()
    assert advantages[:3] == pytest.approx([0.5, 0.5, -0.5])  # budget 1, two trajectories
    assert advantages[3:] == [0.0] * 5
    assert (out["loss_mask"].sum(-1) > 0).tolist() == [True] * 3 + [False] * 3 + [False] * 2
    assert trainer.all_metrics["advbudget/skipped_group_fraction"] == pytest.approx(0.5)


ROW_WEIGHTED = [
    "generator.step_wise_trajectories=true",
    "trainer.algorithm.advbudget.row_weights=true",
]


def test_row_weights_divide_each_step_by_its_trajectory_steps() -> None:
    """With row_weights, each step's advantages are the trajectory's over its step count."""
    last = [False, True, True, False, False, True, True]  # 2 trajectories a prompt
    uids = ["a"] * 3 + ["b"] * 4  # steps: a 2 and 1, b 3 and 1
    rewards = [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    advantages = {}
    for weighted in ("false", "true"):
        trainer = _trainer(
            "trainer.algorithm.advantage_estimator=reward_budget",
            "generator.step_wise_trajectories=true",
            f"trainer.algorithm.advbudget.row_weights={weighted}",
        )
        batch = _batch(rewards, uids=uids)
        batch.metadata["is_last_step"] = last
        advantages[weighted] = trainer.compute_advantages_and_returns(batch)["advantages"][:, -1]
    assert advantages["false"].abs().min() > 0
    ratio = (advantages["true"] / advantages["false"]).tolist()
    assert ratio == pytest.approx([1 / 2, 1 / 2, 1.0, 1 / 3, 1 / 3, 1 / 3, 1.0], rel=1e-6)


def test_step_wise_kappa_scores_whole_trajectories(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step-wise, κ_eff's log-prob of a trajectory is the sum of its steps' (each step's
    response tokens), forwarded for the pair trajectories' steps only."""
    trainer = _trainer(
        "trainer.algorithm.advantage_estimator=reward_budget",
        "generator.step_wise_trajectories=true",
    )
    last = [False, True, True, False, False, True]  # trajectories of 2, 1 and 3 steps
    forwarded: list[list[int]] = []

    def step_logprobs(data: Any, rows: list[int]) -> torch.Tensor:
        forwarded.append(rows)
        return torch.tensor([10.0**row for row in rows], dtype=torch.float64)

    monkeypatch.setattr(trainer, "_sequence_logprobs", step_logprobs)
    batch = _batch([0.0] * 6)
    batch.metadata["is_last_step"] = last
    assert trainer._trajectory_logprobs(batch, [0, 2]).tolist() == [11.0, 111000.0]
    assert forwarded == [[0, 1, 3, 4, 5]]


def test_an_estimator_with_memory_remembers_each_prompt_by_uid(tmp_path: Any) -> None:
    """spo keeps a per-prompt baseline across steps, keyed by SkyRL's uid; the callback
    saves it beside the checkpoint and a resumed trainer reads it back."""
    trainer = _trainer("trainer.algorithm.advantage_estimator=advbudget_spo")
    first = _advantages(trainer, _batch(REWARDS, pad=2))
    second = _advantages(trainer, _batch(REWARDS, pad=2))
    assert not np.allclose(first, second)  # the baseline moved
    state = trainer.advbudget_memory.estimator_state
    assert state is not None
    assert len(state) == 3

    from skyrl.train.utils.callbacks import TrainingControl

    folder = tmp_path / "global_step_2"
    folder.mkdir()
    control = TrainingControl()
    MemoryCallback().on_save(trainer, _input(ckpt_path=str(folder)), control)
    saved = json.loads((folder / MEMORY_FILE).read_text(encoding="utf-8"))
    assert RunMemory.from_state_dict(saved).estimator_state is not None

    resumed = _trainer(
        "trainer.algorithm.advantage_estimator=advbudget_spo", f"trainer.ckpt_path={tmp_path}"
    )
    resumed.global_step = 2
    MemoryCallback().on_train_start(resumed, _input(), control)
    third = _advantages(resumed, _batch(REWARDS, pad=2))
    again = _advantages(trainer, _batch(REWARDS, pad=2))
    np.testing.assert_allclose(third, again, atol=1e-6)


class FakePolicy:
    """A policy forward for ``rho="kl"``: token t of a sequence gets log-prob
    ``-version * t / 1000`` (its version set by the test: the weights moved), as SkyRL's
    forward returns it, ``[n, response_length]`` over the sequences' last positions."""

    def __init__(self) -> None:
        self.version = 1.0
        self.forwarded: list[int] = []

    def __call__(self, sequences: Any, attention_mask: Any, response_length: int) -> Any:
        self.forwarded.append(int(sequences.shape[0]))
        return -self.version * sequences[:, -response_length:].double() / 1000


def _kl_batch(rewards: list[float], tokens: int) -> Any:
    """:func:`_batch` with prompt and response tokens (``tokens`` + row), as SkyRL's
    forward reads them, and the policy's ``action_log_probs`` of the step (version 1)."""
    batch = _batch(rewards)
    rows, length = len(rewards), batch.metadata["response_length"]
    sequences = tokens + torch.arange(rows)[:, None] + torch.arange(2 + length)[None, :]
    batch["sequences"] = sequences
    batch["attention_mask"] = torch.ones_like(sequences)
    batch["action_log_probs"] = -sequences[:, -length:].double() / 1000
    return batch


@pytest.mark.parametrize("skyrl_forward", [True, False])
def test_spo_kl_rho_scores_each_prompts_last_response_again(
    monkeypatch: pytest.MonkeyPatch, skyrl_forward: bool
) -> None:
    """rho=kl: step 1 meets every prompt first (ρ 0.96); at step 2 each prompt's last
    response of step 1 is scored again by the policy now, its drift sets ρ (SPO's
    clip(2^(-D/0.06), 0.875, 0.96)), and the advantages are the core's with that ρ. The
    log-probs of the step come from SkyRL's forward, or from ours when SkyRL skipped it."""
    from advbudget import EstimatorState
    from advbudget.core import spo_rho

    trainer = _trainer(
        "trainer.algorithm.advantage_estimator=advbudget_spo", "trainer.algorithm.advbudget.rho=kl"
    )
    policy = FakePolicy()
    monkeypatch.setattr(trainer, "_policy_logprobs", policy)
    state, uids = EstimatorState(), [str(row // G) for row in range(len(REWARDS))]
    for step, (version, tokens) in enumerate([(1.0, 10), (1.3, 20)], start=1):
        policy.version = version
        batch = _kl_batch(REWARDS, tokens)
        if not skyrl_forward:
            batch["action_log_probs"] = None
        got = _advantages(trainer, batch)
        # the last response of prompt p (rows 4p..4p+3) is row 4p+3; kept from step 1
        # with log-probs at version 1, its drift at version 1.3 is 0.3 x its mean token / 1000
        length = batch.metadata["response_length"]
        kept = [10 + 4 * p + 3 + 2 + np.arange(length) for p in range(3)]
        drift = np.array([0.3 * k.mean() / 1000 for k in kept]) if step == 2 else np.zeros(3)
        rho = np.repeat(spo_rho(drift), G)
        expected = compute_advantages(
            np.asarray(REWARDS), "spo", group_ids=uids, prompt_ids=uids, state=state, rho=rho
        )
        np.testing.assert_allclose(got, np.asarray(expected.advantages), rtol=0, atol=1e-6)
        metrics = trainer.all_metrics
        assert metrics["advbudget/spo_rho_mean"] == pytest.approx(float(spo_rho(drift).mean()))
        assert metrics["advbudget/spo_first_seen_fraction"] == (1.0 if step == 1 else 0.0)
        if step == 2:  # drifts 0.0048-0.0072: ρ 0.92-0.95, inside the clip
            assert np.all((rho > 0.875) & (rho < 0.96)), rho
    # SkyRL's forward skipped: ours scores the step's 3 last responses, each step; the
    # kept ones are scored again at step 2 (one forward: one shape)
    assert policy.forwarded == ([3] if skyrl_forward else [3, 3, 3])


def _input(**fields: Any) -> Any:
    from skyrl.train.utils.callbacks import CallbackInput

    return CallbackInput(global_step=0, epoch=0, total_steps=1, steps_per_epoch=1, **fields)


def test_the_config_takes_the_advbudget_mapping() -> None:
    cfg = parse_config(
        [
            "trainer.override_entrypoint=advbudget.adapters.skyrl",
            "trainer.algorithm.advantage_estimator=reward_budget",
            "trainer.algorithm.advbudget.budget=0.5",
            "trainer.algorithm.advbudget.solved_reward=null",
        ]
    )
    options = check_run(cfg)
    assert dict(options.estimator_options) == {"budget": 0.5}
    assert options.solved_reward is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.algorithm.advbudget.budjet=0.5"], "trainer.algorithm.advbudget.budjet: not an"),
        (
            ["trainer.algorithm.advantage_estimator=advbudget_gigpo"],
            "trainer.algorithm.advantage_estimator: advbudget_gigpo needs anchor_ids",
        ),
        (
            ["trainer.algorithm.advantage_estimator=advbudget_gdpo"],
            "estimator: advbudget_gdpo takes reward components",
        ),
        (
            [
                "trainer.algorithm.advantage_estimator=advbudget_spo",
                "trainer.algorithm.advbudget.rho=kl",
                "generator.step_wise_trajectories=true",
            ],
            "trainer.algorithm.advbudget.rho: 'kl' is not built for step-wise trajectories",
        ),
        (
            [
                "trainer.algorithm.advantage_estimator=advbudget_rae",
                "trainer.algorithm.advbudget.rho=kl",
            ],
            "trainer.algorithm.advbudget.rho: 'kl' is spo's KL-adaptive forgetting",
        ),
        (
            [
                "trainer.algorithm.advantage_estimator=grpo",
                "trainer.algorithm.advbudget.rho=kl",
            ],
            "trainer.algorithm.advbudget.rho: 'kl' is spo's KL-adaptive forgetting; skyrl's own",
        ),
        (
            ["trainer.algorithm.advbudget.row_weights=true"],
            "trainer.algorithm.advbudget.row_weights: weighs the steps of step-wise trajectories",
        ),
        (
            [*ROW_WEIGHTED, "trainer.algorithm.policy_loss_type=clip_cov"],
            "trainer.algorithm.advbudget.row_weights: SkyRL's policy loss 'clip_cov' is not",
        ),
        (
            [*ROW_WEIGHTED, "trainer.algorithm.advantage_batch_normalize=true"],
            "trainer.algorithm.advbudget.row_weights: trainer.algorithm.advantage_batch_normalize",
        ),
        (
            [*ROW_WEIGHTED, "trainer.algorithm.advantage_estimator=grpo"],
            "trainer.algorithm.advbudget.row_weights: scales an advbudget estimator's",
        ),
        (
            ["trainer.algorithm.advbudget.row_weights=often"],
            "trainer.algorithm.advbudget.row_weights: expected true or false, got 'often'",
        ),
    ],
)
def test_a_run_it_cannot_honour_is_refused_before_ray(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace(".", r"\.")) as refused:
        check_run(parse_config(["trainer.algorithm.advantage_estimator=reward_budget", *overrides]))
    assert "\n" not in str(refused.value)


def test_step_wise_refuses_the_estimators_that_read_response_lengths() -> None:
    """Step-wise, SkyRL hands the estimator a mask of ones over the last turns
    (trainer.py:1189): a length would be the padded width, so these are refused before Ray
    starts, and every other catalogue estimator runs."""
    from advbudget.core import estimator_specs

    step_wise = "generator.step_wise_trajectories=true"
    for spec in estimator_specs():
        if spec.components or set(spec.required_inputs) - {"response_lengths"} or spec.tracker:
            continue  # refused for another reason (rewards, inputs, memory): tested apart
        overrides = [f"trainer.algorithm.advantage_estimator=advbudget_{spec.name}", step_wise]
        if any(declared.name == "response_lengths" for declared in spec.inputs):
            with pytest.raises(ValueError, match=r"reads each response's length") as refused:
                check_run(parse_config(overrides))
            assert "\n" not in str(refused.value)
            check_run(parse_config(overrides[:1]))  # one row per trajectory: its lengths
        else:
            check_run(parse_config(overrides))


def _generated(rewards: list[float], first_uid: int) -> tuple[dict[str, Any], list[str]]:
    """A SkyRL ``GeneratorOutput`` of one generation round (G rows a prompt, uids counted
    from ``first_uid``), as its generator returns it."""
    rows = len(rewards)
    output = {
        "prompt_token_ids": [[1, 2]] * rows,
        "response_ids": [[3, 4, 5]] * rows,
        "rewards": list(rewards),
        "loss_masks": [[1, 1, 1]] * rows,
        "stop_reasons": ["stop"] * rows,
        "rollout_logprobs": None,
        "rollout_metrics": {},
    }
    return output, [str(first_uid + row // G) for row in range(rows)]


def test_resample_trains_on_the_kept_groups_of_several_rounds() -> None:
    """Two prompts a step: round 1 keeps one group, round 2 the other's place; the step
    trains on the two kept groups, in round order, with the fractions of all four."""
    trainer = _trainer(
        "trainer.algorithm.advantage_estimator=reward_budget",
        "trainer.algorithm.advbudget.skipped_groups=resample",
        "trainer.train_batch_size=2",
    )
    assert trainer.cfg.trainer.algorithm.dynamic_sampling.type == "advbudget_resample"
    first = _generated([1, 1, 1, 1, 1, 0, 0, 1], 0)  # prompt 0 dead, prompt 1 kept
    assert trainer.handle_dynamic_sampling(*first)[2] is True  # one kept: sample again
    second = _generated([0, 0, 1, 0, 0, 0, 0, 0], 2)  # prompt 2 kept, prompt 3 dead
    output, uids, again = trainer.handle_dynamic_sampling(*second)
    assert again is False
    assert uids == ["1"] * 4 + ["2"] * 4
    assert output["rewards"] == [1, 0, 0, 1, 0, 0, 1, 0]
    assert trainer.all_metrics["advbudget/skipped_group_fraction"] == pytest.approx(0.5)
    assert trainer.all_metrics["advbudget/generation_rounds"] == 2


def test_resample_stops_at_the_cap_and_drops_the_fillers() -> None:
    trainer = _trainer(
        "trainer.algorithm.advantage_estimator=reward_budget",
        "trainer.algorithm.advbudget.skipped_groups=resample",
        "trainer.algorithm.advbudget.max_generation_batches=1",
        "trainer.train_batch_size=2",
    )
    with pytest.warns(UserWarning, match="found 1 of 2 kept groups in 1 generation rounds"):
        output, uids, again = trainer.handle_dynamic_sampling(
            *_generated([1, 1, 1, 1, 1, 0, 0, 1], 0)
        )
    assert again is False
    assert uids == ["1"] * 4 + ["0"] * 4  # the kept group first, then the filler
    batch = _batch([float(r) for r in output["rewards"]], uids=uids)
    out = trainer.compute_advantages_and_returns(batch)
    assert (out["loss_mask"].sum(-1) > 0).tolist() == [True] * 4 + [False] * 4


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (["trainer.algorithm.dynamic_sampling.type=filter"], "both generate again"),
        (["generator.step_wise_trajectories=true"], "step-wise trajectories"),
        (["trainer.algorithm.advantage_estimator=grpo"], "'grpo' is SkyRL's own"),
    ],
)
def test_resample_refuses_what_it_cannot_do(overrides: list[str], reason: str) -> None:
    cfg = parse_config(
        [
            "trainer.algorithm.advantage_estimator=reward_budget",
            "trainer.algorithm.advbudget.skipped_groups=resample",
            *overrides,
        ]
    )
    with pytest.raises(ValueError, match="skipped_groups: 'resample' .*" + reason):
        check_run(cfg)
