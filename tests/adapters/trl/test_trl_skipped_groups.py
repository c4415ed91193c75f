"""``skipped_groups`` in TRL: keep, drop (out of the loss and its normaliser for every
``loss_type``) and resample (DAPO's dynamic sampling), through TRL's real loss and loop."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace
from typing import Any

import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from advbudget.adapters.trl import AdvBudgetGRPOTrainer  # noqa: E402
from advbudget.testing import rounding_tolerance  # noqa: E402

from .conftest import TRL_WARNINGS, mixed_reward  # noqa: E402
from .test_trl_train import _capture  # noqa: E402

pytestmark = TRL_WARNINGS

# Every loss TRL 1.13 to 1.16 offers, with the settings it requires.
LOSS_TYPES = {
    "grpo": {},
    "dr_grpo": {},
    "dapo": {},
    "bnpo": {},
    "cispo": {},
    "sapo": {},
    "luspo": {"importance_sampling_level": "sequence"},
    "vespo": {},
}
ROWS, GROUP, PROMPT_LEN, COMPLETION_LEN = 12, 4, 5, 16
# TRL 1.16's fused LM head (trl/kernels/chunked_logprob.py) computes log-probs and their
# gradient in float32 tiles whatever the model's dtype; TRL 1.13 runs the float64 head.
HEAD_DTYPE = torch.float32 if hasattr(trl.trainer.utils, "add_fused_lm_head") else torch.float64


def _batch(trainer: Any) -> tuple[dict[str, Any], Any]:
    """A generation output as TRL builds it (float64), and its advantage result: group 1
    is tied (skipped), row 8's reward is NaN (left out), the rest train."""
    generator = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    rewards = torch.tensor([1, 0, 1, 1, 1, 1, 1, 1, math.nan, 0, 0, 1], dtype=torch.float64)
    result = trainer._advantages(rewards, GROUP)
    lengths = torch.tensor([16, 3, 9, 12, 5, 16, 1, 7, 10, 2, 16, 8])
    completion_mask = (torch.arange(COMPLETION_LEN) < lengths[:, None]).long()
    prompt_mask = torch.ones(ROWS, PROMPT_LEN, dtype=torch.long)
    prompt_mask[::3, :2] = 0  # left padding
    logps = -torch.rand(ROWS, COMPLETION_LEN, generator=generator, dtype=torch.float64)
    output = {
        "prompt_ids": torch.randint(0, vocab, (ROWS, PROMPT_LEN), generator=generator),
        "prompt_mask": prompt_mask,
        "completion_ids": torch.randint(0, vocab, (ROWS, COMPLETION_LEN), generator=generator),
        "completion_mask": completion_mask,
        "advantages": result.advantages.to(torch.float64),
        "num_items_in_batch": completion_mask.sum(),
        # off the current policy, so that the clipping and the ratios take part
        "old_per_token_logps": logps,
        "ref_per_token_logps": logps - 0.3,
    }
    return output, result


def _gradient(trainer: Any, inputs: dict[str, Any]) -> torch.Tensor:
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, inputs).backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_type", list(LOSS_TYPES))
def test_drop_gradient_equals_the_kept_only_batch(make_trainer: Any, loss_type: str) -> None:
    """One update's gradient with ``drop`` equals TRL's gradient on the batch holding only
    the kept rows, KL (beta) and entropy bonus included, to the rounding of the head's sums
    over the batch's tokens (their order follows the batch's shape and the CPU); dr_grpo's
    documented rule: its constant max_completion_length per kept sequence."""
    config = {
        "loss_type": loss_type,
        "beta": 0.1,
        "entropy_coef": 0.01,
        "num_generations": GROUP,
        "max_completion_length": COMPLETION_LEN,
        **LOSS_TYPES[loss_type],
    }
    trainer = make_trainer(AdvBudgetGRPOTrainer, config=config, skipped_groups="drop")
    trainer.model.double().train()
    trainer.current_gradient_accumulation_steps = 1
    output, result = _batch(trainer)
    valid = result.valid
    assert valid.tolist() == [True] * 4 + [False] * 5 + [True] * 3

    kept_only = {key: value[valid] if value.dim() else value for key, value in output.items()}
    kept_only["num_items_in_batch"] = kept_only["completion_mask"].sum()
    reference = _gradient(trainer, kept_only)  # the row factor is 1 before any drop

    trainer._drop_invalid_rows(output, valid, slice(0, ROWS), "train")
    assert output["completion_mask"][~valid].sum() == 0
    dropped = _gradient(trainer, output)
    assert torch.count_nonzero(reference) > 0
    tolerance = rounding_tolerance(reference, terms=ROWS * COMPLETION_LEN, dtype=HEAD_DTYPE)
    torch.testing.assert_close(dropped, reference, rtol=0, atol=tolerance)

    # and keep differs, far beyond that tolerance, wherever the normaliser counts rows or
    # tokens (bnpo's tokens mean: rows with A = 0 still count)
    trainer._advbudget_row_scale["train"] = 1.0
    kept, _ = _batch(trainer)
    if loss_type != "bnpo":
        assert (_gradient(trainer, kept) - reference).abs().max() > 1000 * tolerance


def test_dr_grpo_says_what_drop_does_with_its_constant(make_trainer: Any, caplog: Any) -> None:
    with caplog.at_level("WARNING", logger="advbudget.adapters.trl._trainer"):
        make_trainer(AdvBudgetGRPOTrainer, config={"loss_type": "dr_grpo"}, skipped_groups="drop")
        make_trainer(AdvBudgetGRPOTrainer, config={"loss_type": "dapo"}, skipped_groups="drop")
        make_trainer(AdvBudgetGRPOTrainer, config={"loss_type": "dr_grpo"})
    lines = [r.getMessage() for r in caplog.records if "divides by a constant" in r.getMessage()]
    assert lines == [
        "AdvBudgetGRPOTrainer: loss_type='dr_grpo' divides by a constant by design "
        "(max_completion_length per sequence); skipped_groups='drop' counts the kept "
        "sequences only"
    ]


def test_skip_empty_groups_is_a_deprecated_alias(make_trainer: Any) -> None:
    with pytest.warns(DeprecationWarning, match="skipped_groups='drop'"):
        trainer = make_trainer(AdvBudgetGRPOTrainer, skip_empty_groups=True)
    assert trainer.advbudget_options.skipped_groups == "drop"
    with pytest.warns(DeprecationWarning, match="skip_empty_groups is deprecated"):
        assert (
            make_trainer(
                AdvBudgetGRPOTrainer, skip_empty_groups=False
            ).advbudget_options.skipped_groups
            == "keep"
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"skipped_groups": "skip"},
            r"^skipped_groups: expected one of keep, drop, resample, got 'skip'$",
        ),
        ({"skipped_groups": None}, r"^skipped_groups: expected one of .*, got None$"),
        ({"max_generation_batches": 0}, r"^max_generation_batches: expected an int >= 1, got 0$"),
        (
            {"max_generation_batches": 2.5},
            r"^max_generation_batches: expected an int >= 1, got 2\.5$",
        ),
    ],
)
def test_bad_options_fail_before_the_model_loads(kwargs: dict[str, Any], message: str) -> None:
    # No model, no dataset: the options are checked first.
    with pytest.raises(ValueError, match=message):
        AdvBudgetGRPOTrainer(model="no-such-model", reward_funcs=[], **kwargs)


@pytest.mark.skipif(
    not hasattr(trl.GRPOTrainer, "compute_liger_loss"),
    reason=f"trl {trl.__version__} computes the Liger loss in _compute_loss (trl>=1.14): "
    "nothing to refuse",
)
def test_liger_with_a_per_sequence_loss_is_refused_on_trl_1_13(tmp_path: Any) -> None:
    """TRL 1.13's Liger loss bypasses _compute_loss, where drop divides grpo's, sapo's,
    luspo's and dr_grpo's loss by the kept rows: refused before the model loads. The
    token-level losses read the dropped rows off the mask and pass."""
    from advbudget.adapters.trl._trainer import _check_loss_path

    args = trl.GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", use_liger_kernel=True,
        loss_type="grpo", activation_checkpointing=False,
    )  # fmt: skip
    message = (
        "skipped_groups: 'drop' with loss_type='grpo' and use_liger_kernel=True needs "
        f"trl>=1.14, got trl {trl.__version__} (its Liger loss bypasses the adapter's "
        "per-sequence normaliser); use skipped_groups='keep' or a token-level loss_type "
        "(dapo, bnpo, cispo, vespo), or use_liger_kernel=False"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        AdvBudgetGRPOTrainer(model="no-model", reward_funcs=[], args=args, skipped_groups="drop")
    _check_loss_path(SimpleNamespace(use_liger_kernel=True, loss_type="dapo"), "drop")


def test_a_patched_compute_loss_refuses_per_sequence_drop() -> None:
    """A GRPOTrainer whose compute_loss is not TRL's (Unsloth's rewritten trainer, which
    computes its own loss) never reaches the adapter's _compute_loss."""
    from advbudget.adapters.trl._trainer import _check_loss_path

    def compute_loss(self: Any, model: Any, inputs: Any) -> Any:
        raise AssertionError("never called")

    compute_loss.__module__ = "UnslothGRPOTrainer"
    grpo = SimpleNamespace(use_liger_kernel=False, loss_type="grpo")
    message = (
        "skipped_groups: 'resample' with loss_type='grpo' needs TRL's own "
        "GRPOTrainer.compute_loss, got one from UnslothGRPOTrainer (a "
        "patched trainer, such as Unsloth's, bypasses the adapter's per-sequence normaliser); "
        "use skipped_groups='keep' or a token-level loss_type (dapo, bnpo, cispo, vespo)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _check_loss_path(grpo, "resample", compute_loss)
    dapo = SimpleNamespace(use_liger_kernel=False, loss_type="dapo")
    _check_loss_path(dapo, "drop", compute_loss)
    _check_loss_path(grpo, "drop")  # TRL's own compute_loss


def test_resample_needs_whole_groups_per_process() -> None:
    # Only reachable with several processes (one process holds the whole generation
    # batch, which TRL already requires to hold whole groups): the check on its own.
    trainer = SimpleNamespace(
        args=SimpleNamespace(per_device_train_batch_size=3, steps_per_generation=1),
        num_generations=2,
        train_dataset=[],
    )
    with pytest.raises(ValueError, match=r"^skipped_groups: 'resample' needs each process's"):
        AdvBudgetGRPOTrainer._check_resample(trainer)


def _group_checks(trainer: Any, outputs: list[dict[str, Any]], group: int) -> int:
    """Each assembled batch holds whole groups (one prompt per group); returns how many
    groups were dropped whole (fillers after a shortfall), and checks every other group
    trains (a reward gap: advantages that differ)."""
    tokenizer = trainer.processing_class
    dropped = 0
    for output in outputs:
        texts = tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True)
        tokens = output["completion_mask"].sum(dim=1)
        for start in range(0, len(texts), group):
            rows = slice(start, start + group)
            assert len(set(texts[rows])) == 1, "a group's rows came from different prompts"
            if int(tokens[rows].sum()) == 0:
                dropped += 1
            else:
                advantages = output["advantages"][rows]
                assert float(advantages.max() - advantages.min()) > 0
    return dropped


def test_resample_trains_only_on_kept_groups(make_trainer: Any) -> None:
    """The mixed dataset has 3 dead prompts of 8 ("const": tied, "none": unscorable):
    resampling fills every step with kept groups, and logs the rounds it took."""
    trainer = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=mixed_reward,
        config={"max_steps": 4},
        skipped_groups="resample",
    )
    seen = _capture(trainer)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    rounds = [entry["advbudget/generation_batches"] for entry in logs]
    assert len(rounds) == 4
    assert all(r >= 1 for r in rounds)
    assert sum(rounds) > 4, "no step needed a second round: the test shows nothing"
    assert _group_checks(trainer, seen, 4) == 0
    # the fractions are over every generated group: dead ones were seen
    assert max(entry["advbudget/skipped_group_fraction"] for entry in logs) > 0


def test_resample_warns_and_goes_on_when_rounds_run_out(
    make_trainer: Any, train_dataset: Any
) -> None:
    dead = train_dataset.filter(lambda row: row["kind"] == "const")  # every group tied
    trainer = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=mixed_reward,
        config={"max_steps": 2},
        skipped_groups="resample",
        max_generation_batches=3,
        train_dataset=dead,
    )
    seen = _capture(trainer)
    with pytest.warns(RuntimeWarning, match=r"found 0 of 2 kept groups in 3 generation rounds"):
        trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["advbudget/generation_batches"] for entry in logs] == [3.0, 3.0]
    assert _group_checks(trainer, seen, 4) == 4  # every group dropped, the step done


def _recount(steps: list[tuple[list[Any], list[float]]], group: int) -> dict[str, float]:
    """never/always-solved among prompts seen twice, counted by hand from the rewards."""
    history: dict[str, list[list[float]]] = {}
    for prompts, rewards in steps:
        for g in range(len(rewards) // group):
            scored = [r for r in rewards[g * group : (g + 1) * group] if not math.isnan(r)]
            if scored:
                history.setdefault(json.dumps(prompts[g * group]), []).append(scored)
    recurring = [groups for groups in history.values() if len(groups) >= 2]
    return {
        "recurring_prompts": float(len(recurring)),
        "never_solved_prompt_fraction": sum(all(max(g) < 1 for g in groups) for groups in recurring)
        / len(recurring),
        "always_solved_prompt_fraction": sum(
            all(min(g) >= 1 for g in groups) for groups in recurring
        )
        / len(recurring),
    }


def test_prompt_ledger_over_two_epochs_and_a_resume(make_trainer: Any, tmp_path: Any) -> None:
    """8 prompts, 2 a step: epoch 2 starts at step 5. The ledger logged at step 8 equals
    a hand recount of the rewards TRL computed, and a run resumed from step 4's
    checkpoint still knows epoch 1 (else no prompt would be recurring)."""
    config = {"max_steps": 8, "save_strategy": "steps", "save_steps": 4}
    trainer = make_trainer(AdvBudgetGRPOTrainer, reward_funcs=mixed_reward, config=config)
    steps: list[tuple[list[Any], list[float]]] = []
    original = trainer._generate_round

    def recorded(inputs: Any) -> Any:
        output, rewards = original(inputs)
        steps.append(([example["prompt"] for example in inputs], rewards.tolist()))
        return output, rewards

    trainer._generate_round = recorded
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert math.isnan(logs[3].get("advbudget/never_solved_prompt_fraction", math.nan))
    expected = _recount(steps, 4)
    assert expected["recurring_prompts"] == 7  # the "none" prompt never has a reward
    for key, value in expected.items():
        assert logs[-1][f"advbudget/{key}"] == pytest.approx(value), key

    resumed = make_trainer(AdvBudgetGRPOTrainer, reward_funcs=mixed_reward, config=config)
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-4"))
    last = [entry for entry in resumed.state.log_history if "loss" in entry][-1]
    assert last["advbudget/recurring_prompts"] == 7
