"""End to end on CPU: the tiny Qwen3 model trains with budget advantages through TRL."""

from __future__ import annotations

import math
from typing import Any

import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from advbudget import compute_advantages  # noqa: E402
from advbudget.adapters.trl import AdvBudgetGRPOTrainer  # noqa: E402

from .conftest import TRL_WARNINGS, finite, mixed_reward  # noqa: E402

pytestmark = TRL_WARNINGS


def _capture(trainer: Any) -> list[dict[str, Any]]:
    """Record each output of ``_generate_and_score_completions`` (what the loss receives)."""
    seen: list[dict[str, Any]] = []
    original = trainer._generate_and_score_completions

    def wrapped(inputs: Any) -> dict[str, Any]:
        output = original(inputs)
        seen.append({k: v.clone() if torch.is_tensor(v) else v for k, v in output.items()})
        return output

    trainer._generate_and_score_completions = wrapped
    return seen


def test_budget_trains_and_logs(make_trainer: Any) -> None:
    trainer = make_trainer(AdvBudgetGRPOTrainer, config={"max_steps": 3}, kappa_every=1)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "no weight changed"
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 3
    for key in (
        "advbudget/skipped_group_fraction",
        "advbudget/advantage_gap_mean",
        "advbudget/positive_advantage_fraction",
        "advbudget/kappa_eff/mean",
    ):
        assert any(key in entry for entry in logs), key
    assert finite([entry.get("advbudget/kappa_eff/mean") for entry in logs])
    result = trainer.last_advantage_result
    assert result is not None
    assert result.estimator == "budget"
    # TRL's completions log holds the advantages that were used.
    logged = list(trainer._logs["advantages"])
    assert logged == pytest.approx(result.advantages.tolist())


@pytest.mark.parametrize("skipped_groups", ["keep", "drop"])
def test_skipped_and_unscorable_rollouts(make_trainer: Any, skipped_groups: str) -> None:
    trainer = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=mixed_reward,
        config={"max_steps": 2, "per_device_train_batch_size": 16},
        skipped_groups=skipped_groups,
    )
    seen = _capture(trainer)
    trainer.train()
    assert seen
    # Each prompt's text tells its kind: "const" groups have no gap, "none" are unscorable.
    kind_of = {
        row[-1]["content"]: kind
        for row, kind in zip(
            trainer.train_dataset["prompt"], trainer.train_dataset["kind"], strict=True
        )
    }
    tokenizer = trainer.processing_class
    checked = 0
    for output in seen:
        texts = tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True)
        tokens = output["completion_mask"].sum(dim=1)
        for i, text in enumerate(texts):
            (kind,) = [k for content, k in kind_of.items() if content in text]
            if kind in ("const", "none"):
                checked += 1
                assert output["advantages"][i].item() == 0.0
                # Dropped, the rollout leaves the loss: no token counts.
                assert (tokens[i].item() == 0) is (skipped_groups == "drop")
        assert output["num_items_in_batch"].item() == tokens.sum().item()
    assert checked >= 8
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert any(entry["advbudget/skipped_group_fraction"] > 0 for entry in logs)


def test_solved_split_in_trl_logs(make_trainer: Any) -> None:
    """``advbudget/{unsolved,solved}_group_fraction`` in TRL's log every step, equal to the
    fractions counted by hand from the rewards TRL computed: over the groups with a reward
    ("none" prompts are unscorable: no reward, in neither), at the default bar 1.0 ("const"
    prompts score 1.0 for every completion: solved)."""
    trainer = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=mixed_reward,
        config={"max_steps": 2, "per_device_train_batch_size": 16},
    )
    seen: list[tuple[list[float], int]] = []
    original = trainer._calculate_rewards  # TRL's: every process's rewards, [B, funcs]

    def wrapped(*args: Any) -> Any:
        rewards_per_func = original(*args)
        seen.append((rewards_per_func[:, 0].tolist(), trainer.num_generations))  # weight 1
        return rewards_per_func

    trainer._calculate_rewards = wrapped
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == len(seen) == 2
    for entry, (rewards, size) in zip(logs, seen, strict=True):
        groups = [rewards[start : start + size] for start in range(0, len(rewards), size)]
        scored = [[r for r in g if not math.isnan(r)] for g in groups]
        scored = [g for g in scored if g]
        solved = sum(all(r >= 1.0 for r in g) for g in scored) / len(scored)
        unsolved = sum(all(r < 1.0 for r in g) for g in scored) / len(scored)
        assert entry["advbudget/solved_group_fraction"] == pytest.approx(solved)
        assert entry["advbudget/unsolved_group_fraction"] == pytest.approx(unsolved)
    assert any(entry["advbudget/solved_group_fraction"] > 0 for entry in logs)  # "const"


def test_solved_split_off_and_bad_values(make_trainer: Any) -> None:
    """``solved_reward=None``: the two keys are absent; a bad value fails at construction,
    in one line naming the option."""
    for bad in (True, float("nan"), "1.0"):
        with pytest.raises(
            ValueError, match=r"^solved_reward: expected a finite number or None, got "
        ):
            make_trainer(AdvBudgetGRPOTrainer, solved_reward=bad)
    trainer = make_trainer(AdvBudgetGRPOTrainer, config={"max_steps": 1}, solved_reward=None)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logs
    assert "advbudget/skipped_group_fraction" in logs[0]
    assert not any("solved_group_fraction" in key for entry in logs for key in entry)


def test_advantages_match_core(make_trainer: Any) -> None:
    trainer = make_trainer(AdvBudgetGRPOTrainer, advantage_options={"budget": 2.0})
    rewards = torch.tensor([[1.0], [0.0], [0.0], [0.0], [1.0], [1.0], [1.0], [1.0]])
    got = trainer.compute_group_advantages(rewards, 4)
    want = compute_advantages(rewards[:, 0].numpy(), "budget", group_size=4, budget=2.0)
    assert got.advantages.tolist() == pytest.approx(want.advantages.tolist())
    assert got.group_skipped.tolist() == [False, True]


def test_errors(make_trainer: Any) -> None:
    with pytest.raises(ValueError, match="nan_policy"):
        make_trainer(AdvBudgetGRPOTrainer, nan_policy="zero")
    with pytest.raises(ValueError, match="kappa_every"):
        make_trainer(AdvBudgetGRPOTrainer, kappa_every=-1)
    with pytest.raises(ValueError, match="estimator: expected one of"):
        make_trainer(AdvBudgetGRPOTrainer, advantage_estimator="nope")
    with pytest.raises(TypeError, match="advantage_estimator"):
        make_trainer(AdvBudgetGRPOTrainer, advantage_estimator=3)
    with pytest.raises(ValueError, match="multi_objective_aggregation"):
        make_trainer(
            AdvBudgetGRPOTrainer, config={"multi_objective_aggregation": "normalize_then_sum"}
        )


def test_kappa_from_reused_batch(make_trainer: Any) -> None:
    # num_iterations=2: TRL keeps old_per_token_logps, the "before" of κ_eff.
    trainer = make_trainer(
        AdvBudgetGRPOTrainer, config={"max_steps": 4, "num_iterations": 2}, kappa_every=1
    )
    seen = _capture(trainer)
    trainer.train()
    assert all("old_per_token_logps" in output for output in seen)
    values = finite([e.get("advbudget/kappa_eff/mean") for e in trainer.state.log_history])
    assert len(values) == 2  # once per generation batch, after its second update
    assert all(value != 0.0 for value in values)


def test_eval_uses_eval_group_size(make_trainer: Any, train_dataset: Any) -> None:
    trainer = make_trainer(
        AdvBudgetGRPOTrainer,
        config={"num_generations_eval": 2, "per_device_eval_batch_size": 8},
        eval_dataset=train_dataset,
    )
    metrics = trainer.evaluate()
    result = trainer.last_advantage_result
    assert result is not None
    assert result.num_groups == 4  # 8 rollouts in groups of 2
    assert "eval_advbudget/skipped_group_fraction" in metrics


def test_kappa_forwards_only_the_pair_rows(make_trainer: Any) -> None:
    """The pass after the update sends each group's o+ and o- through the model, nothing
    else: count the rows the model sees inside ``_kappa_after``."""
    trainer = make_trainer(AdvBudgetGRPOTrainer, config={"max_steps": 3}, kappa_every=1)
    seen: list[int] = []
    expected: list[int] = []
    inside = [False]

    def count(module: Any, args: Any, kwargs: Any) -> None:
        if inside[0]:
            ids = kwargs.get("input_ids", args[0] if args else None)
            seen.append(int(ids.shape[0]))

    before, after = trainer._kappa_before, trainer._kappa_after

    def kappa_before(*args: Any) -> Any:
        # By hand: first max / first min of each group with a gap, in the global batch.
        rows = trainer.last_advantage_result.advantages.view(-1, 4)
        gap = rows.amax(dim=1) > rows.amin(dim=1)
        base = torch.arange(rows.shape[0]) * 4
        pair_rows = torch.cat([(rows.argmax(1) + base)[gap], (rows.argmin(1) + base)[gap]])
        expected.append(max(int(torch.unique(pair_rows).numel()), 1))
        return before(*args)

    def kappa_after() -> None:
        inside[0] = True
        try:
            after()
        finally:
            inside[0] = False

    trainer._kappa_before, trainer._kappa_after = kappa_before, kappa_after
    handle = trainer.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        trainer.train()
    finally:
        handle.remove()
    assert len(expected) == 3
    assert sum(seen) == sum(expected)  # per-device batch 8: at most 2 of each group of 4
    assert all(n < 8 for n in expected)


def test_every_override_is_a_recorded_hook() -> None:
    """A method of ours that shadows one of ``GRPOTrainer``'s (on purpose or by a clash of
    names) is an override, recorded in ``_hooks.HOOKS`` and kept in ``_hooks.TrainerHooks``
    (the shared suite checks that each record resolves and that no other file names one)."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    from advbudget.adapters.trl._hooks import HOOKS

    mro = AdvBudgetGRPOTrainer.__mro__
    overrides = {
        f"{cls.__module__}.{cls.__qualname__}.{name}"
        for cls in mro[: mro.index(GRPOTrainer)]
        for name in vars(cls)
        if hasattr(GRPOTrainer, name) and not name.startswith("__")
    }
    recorded = {
        f"advbudget.adapters.trl._hooks.TrainerHooks.{hook.qualname.rsplit('.', 1)[-1]}"
        for hook in HOOKS
        if hook.use == "override"
    }
    assert overrides == recorded
