"""The per-prompt ledger in OpenRLHF: recorded by the patched advantage step (keyed by a
hash of each group's prompt text), logged through ``experience.info``, saved in OpenRLHF's
checkpoint ``client_states`` by the patched ``BasePPOTrainer.save_logs_and_checkpoints`` and
restored by its ``init_checkpoint_states``. The actor group is a stand-in for OpenRLHF's
``RayActorGroup`` whose ``save_checkpoint`` / ``get_checkpoint_states`` round-trip the
client states through ``torch.save`` / ``torch.load`` (as DeepSpeed's checkpoint does)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("ray")

import ray
import torch

from advbudget.adapters.openrlhf._hooks import LEDGER_STATE, MEMORY_STATE
from advbudget.adapters.openrlhf.testing import make_args, make_experiences, make_maker

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

N = 4
PREFIX = "advbudget/"
#: per epoch, each prompt's rewards (p0 never solved, p1 always solved, p2 and p3 mixed)
EPOCHS = [
    {"p0": [0.0] * 4, "p1": [1.0] * 4, "p2": [0.0, 1.0, 0.0, 0.0], "p3": [0.0] * 4},
    {"p0": [0.0] * 4, "p1": [1.0] * 4, "p2": [0.0] * 4, "p3": [1.0, 0.0, 1.0, 0.0]},
    {"p0": [0.0, 1.0, 0.0, 0.0], "p1": [1.0] * 4, "p2": [0.0] * 4, "p3": [0.0] * 4},
]


def advantage_step(maker: Any, table: dict[str, list[float]], seed: int) -> list[Any]:
    """One rollout batch of the table's prompts through the patched step (rows shuffled
    across micro-batches, the prompt text on each row as OpenRLHF's rollout leaves it)."""
    names = list(table)
    experiences = make_experiences(len(names), N, seed=seed)
    for experience in experiences:
        experience.prompts = [names[slot // N] for slot in experience.index]
        experience.rewards = torch.tensor([table[names[s // N]][s % N] for s in experience.index])
    maker.compute_advantages_and_returns(experiences)
    return experiences


def epoch(maker: Any, table: dict[str, list[float]], seed: int = 0) -> dict[str, float]:
    """:func:`advantage_step`, then the ledger's logged values (every sample carries the
    run's value)."""
    experiences = advantage_step(maker, table, seed)
    names = list(table)
    logged = {}
    for key in (
        "never_solved_prompt_fraction",
        "always_solved_prompt_fraction",
        "recurring_prompts",
    ):
        values = [v for e in experiences for v in e.info.get(PREFIX + key, [])]
        if values:
            assert len(values) == len(names) * N
            assert len(set(values)) == 1
            logged[key] = values[0]
    return logged


def test_two_epochs_by_hand(local_ray: None) -> None:
    maker = make_maker(make_args("reward_budget", N))
    assert epoch(maker, EPOCHS[0]) == {"recurring_prompts": 0.0}  # fractions: none yet
    # p0 unsolved twice, p1 solved twice, p2 and p3 mixed: 1/4 each.
    assert epoch(maker, EPOCHS[1], seed=1) == {
        "never_solved_prompt_fraction": 0.25,
        "always_solved_prompt_fraction": 0.25,
        "recurring_prompts": 4.0,
    }


def test_no_ledger_without_the_solved_split(local_ray: None) -> None:
    args = make_args("reward_budget", N)
    args.advbudget = SimpleNamespace(solved_reward="none")
    assert epoch(make_maker(args), EPOCHS[0]) == {}


class ActorGroup:
    """Stand-in for OpenRLHF's ``RayActorGroup``: the checkpoint's client states."""

    def __init__(self) -> None:
        self.saved: list[tuple[str, bytes]] = []

    def async_run_method(self, method_name: str, **kwargs: Any) -> list[Any]:
        if method_name == "save_checkpoint":
            buffer = io.BytesIO()
            torch.save(kwargs["client_states"], buffer)
            self.saved.append((kwargs["tag"], buffer.getvalue()))
            return [ray.put(None)]
        assert method_name == "get_checkpoint_states"
        states = torch.load(io.BytesIO(self.saved[-1][1]), weights_only=True)
        return [ray.put(states)]


def trainer(path: Path, group: ActorGroup, estimator: str = "reward_budget") -> Any:
    """A real ``BasePPOTrainer`` (not started) with our estimator, checkpointing every
    2 steps into ``path`` through the stand-in actor group."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    args = make_args(estimator, N)
    args.logger = SimpleNamespace(logging_steps=1)
    args.ckpt = SimpleNamespace(save_steps=2, path=str(path), load_enable=True)
    (path / "_actor").mkdir(parents=True, exist_ok=True)
    made = object.__new__(BasePPOTrainer)
    made.args = args
    made.experience_maker = make_maker(args)
    made.actor_model_group = group
    made.critic_model_group = None
    made.wandb_logger = made.tensorboard_logger = None
    made.best_eval_metric_key = made.best_eval_metric_value = None
    made._latest_eval_metric_value = None
    return made


def test_saved_with_the_checkpoint_and_restored_on_resume(local_ray: None, tmp_path: Path) -> None:
    group = ActorGroup()
    first = trainer(tmp_path, group)
    epoch(first.experience_maker, EPOCHS[0])
    first.save_logs_and_checkpoints(1, {}, {"global_step": 1})  # not a save step
    assert group.saved == []
    epoch(first.experience_maker, EPOCHS[1], seed=1)
    first.save_logs_and_checkpoints(2, {}, {"global_step": 2})
    assert [tag for tag, _ in group.saved] == ["global_step2"]

    resumed = trainer(tmp_path, group)
    states = resumed.init_checkpoint_states()
    assert states["global_step"] == 2
    assert states[MEMORY_STATE]["prompt_ledger"]["keys"]
    # The third epoch counts on from the first two: p0 and p3 are mixed now, p2 was mixed
    # in epoch 1, p1 always solved.
    expected = {
        "never_solved_prompt_fraction": 0.0,
        "always_solved_prompt_fraction": 0.25,
        "recurring_prompts": 4.0,
    }
    assert epoch(resumed.experience_maker, EPOCHS[2], seed=2) == expected
    # Without the restore the same epoch is a first sighting.
    fresh = trainer(tmp_path / "fresh", ActorGroup())
    assert epoch(fresh.experience_maker, EPOCHS[2], seed=2) == {"recurring_prompts": 0.0}


def test_a_checkpoint_of_the_ledger_alone_still_restores(local_ray: None, tmp_path: Path) -> None:
    """Checkpoints written before the run's memory held an estimator state carry the
    ledger under its own key: a resume reads it as before."""
    from advbudget.metrics import PromptLedger

    maker = make_maker(make_args("reward_budget", N))
    epoch(maker, EPOCHS[0])
    epoch(maker, EPOCHS[1], seed=1)
    from advbudget.adapters.openrlhf._estimators import run_memory

    ledger = run_memory(maker).ledger
    assert isinstance(ledger, PromptLedger)
    group = ActorGroup()
    buffer = io.BytesIO()
    torch.save({"global_step": 2, LEDGER_STATE: ledger.state_dict()}, buffer)
    group.saved.append(("global_step2", buffer.getvalue()))
    resumed = trainer(tmp_path, group)
    resumed.init_checkpoint_states()
    assert epoch(resumed.experience_maker, EPOCHS[2], seed=2)["recurring_prompts"] == 4.0
