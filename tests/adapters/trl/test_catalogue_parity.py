"""Parity of every TRL mirror (the TRL row's ``own_names``) with TRL's own advantage code
(1.13, 1.16), which is only reachable inside a trainer step; TRL has no returns, only
advantages.

- ``GRPOTrainer`` modes (``scale_rewards`` "group", "none", "batch"): one
  ``AdvBudgetGRPOTrainer`` run each, with the mirror as its estimator and TRL's mode in its
  config. Its step calls TRL's own ``_generate_and_score_completions`` (TRL's advantages)
  and replaces them with ours: both come from the same rollouts, every generation batch.
- ``RLOOTrainer`` (``normalize_advantages`` False, True): a real RLOOTrainer run records
  the per-function rewards and its advantages; ours are the adapter's
  ``compute_group_advantages`` on those rewards.

Each run trains two steps (groups of 4, graded rewards with ties, constant groups and None)
and evaluates once with one generation per prompt (groups of one, which TRL allows in
eval only). Groups of one in training: TRL's configs refuse them, and the adapter's
trainer takes TRL's GRPOConfig, so the refusal is TRL's own. A mirror added to the row
without a case here fails ``test_every_mirror_has_a_case`` (and its parity test); mirrors of
reward components (gdpo) have their own runs, in the module ``COMPONENTS`` names.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from advbudget.adapters import get_convention  # noqa: E402
from advbudget.core import get_spec  # noqa: E402

from .conftest import TRL_WARNINGS  # noqa: E402

pytestmark = TRL_WARNINGS
TRL = get_convention("trl")

# core name -> (TRL trainer, its config's switch)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("GRPOTrainer", {"scale_rewards": "group"}),
    "dr": ("GRPOTrainer", {"scale_rewards": "none"}),
    "grpo_batch_std": ("GRPOTrainer", {"scale_rewards": "batch"}),
    "rloo": ("RLOOTrainer", {"normalize_advantages": False}),
    "rloo_normalized": ("RLOOTrainer", {"normalize_advantages": True}),
}
RUN = {
    "max_steps": 2,
    "per_device_train_batch_size": 16,
    "num_generations": 4,
    "num_generations_eval": 1,
    "per_device_eval_batch_size": 8,
    "eval_strategy": "steps",
    "eval_steps": 2,
}


# mirrors of reward components -> (module, parity test): several reward functions
COMPONENTS = {"gdpo": ("test_trl_gdpo", "test_gdpo_matches_trls_normalize_then_sum")}


def test_every_mirror_has_a_case() -> None:
    assert sorted([*CASES, *COMPONENTS]) == sorted(TRL.own_names)
    for core, (module, test) in COMPONENTS.items():
        assert get_spec(core).components
        assert callable(getattr(importlib.import_module(f"{__package__}.{module}"), test))
    for core, (trainer, switch) in CASES.items():  # the row's prose, word for word
        shown = [f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in switch.items() if v]
        assert TRL.own_names[core] == " ".join([trainer, *shown])


def graded(
    completion_ids: Sequence[Sequence[int]], kind: Sequence[str], **kwargs: Any
) -> list[float | None]:
    """Graded rewards with ties, constant groups and None (NaN) inside groups."""
    out: list[float | None] = []
    for ids, k in zip(completion_ids, kind, strict=True):
        total = sum(ids)
        if k == "none":
            out.append(None)
        elif k == "const":
            out.append(0.5)
        else:
            out.append(None if total % 7 == 0 else float(total % 5) / 3 - 0.4)
    return out


def _compare(pairs: list[tuple[str, Any, Any]]) -> None:
    """(mode, ours, TRL's) of every generation batch: equal, in training and in eval."""
    assert {mode for mode, _, _ in pairs} == {"train", "eval"}
    nonzero = 0
    for _, ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        nonzero += int(torch.count_nonzero(theirs))
    assert nonzero > 0  # the comparison is not between zeros


def _grpo_mode_pairs(
    make_trainer: Any, train_dataset: Any, core: str, switch: dict[str, Any]
) -> list[Any]:
    from advbudget.adapters.trl import AdvBudgetGRPOTrainer

    trainer = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=graded,
        config={**RUN, **switch},
        advantage_estimator=core,
        eval_dataset=train_dataset,
    )
    pairs: list[tuple[str, Any, Any]] = []
    theirs: list[Any] = []
    generate_round, generate = trainer._generate_round, trainer._generate_and_score_completions

    def generate_round_recorded(inputs: Any) -> Any:
        output, rewards = generate_round(inputs)
        theirs.append(output["advantages"].clone())  # TRL's own, before ours replace them
        return output, rewards

    def generate_recorded(inputs: Any) -> Any:
        output = generate(inputs)
        mode = "train" if trainer.model.training else "eval"
        pairs.append((mode, output["advantages"].clone(), theirs[-1]))
        return output

    trainer._generate_round = generate_round_recorded
    trainer._generate_and_score_completions = generate_recorded
    trainer.train()
    return pairs


def _rloo_pairs(
    make_trainer: Any, tiny_model: Path, train_dataset: Any, tmp_path: Path, core: str, switch: Any
) -> list[Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import RLOOTrainer

    from advbudget.adapters.trl import AdvBudgetGRPOTrainer
    from advbudget.adapters.trl.testing import rloo_config

    # no KL in the reward (beta 0): the outcome rewards alone
    args = rloo_config(tmp_path / "rloo", beta=0.0, **RUN, **switch)
    trainer = RLOOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model),
        processing_class=AutoTokenizer.from_pretrained(tiny_model),
        reward_funcs=graded,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=train_dataset,
    )
    seen: list[tuple[str, Any, Any]] = []
    per_func: list[Any] = []
    calculate, generate = trainer._calculate_rewards, trainer._generate_and_score_completions

    def calculate_rewards(*args: Any, **kwargs: Any) -> Any:
        per_func.append(calculate(*args, **kwargs).clone())
        return per_func[-1]

    def generate_and_score(*args: Any, **kwargs: Any) -> Any:
        out = generate(*args, **kwargs)
        mode = "train" if trainer.model.training else "eval"
        seen.append((mode, per_func[-1], out["advantages"].clone()))
        return out

    trainer._calculate_rewards = calculate_rewards
    trainer._generate_and_score_completions = generate_and_score
    trainer.train()
    ours = make_trainer(AdvBudgetGRPOTrainer, reward_funcs=graded, advantage_estimator=core)
    sizes = {"train": args.num_generations, "eval": args.num_generations_eval}
    return [
        (mode, ours.compute_group_advantages(rewards, sizes[mode]).advantages, theirs)
        for mode, rewards, theirs in seen
    ]


@pytest.mark.parametrize("core", sorted(CASES))
def test_mirror(
    make_trainer: Any, tiny_model: Path, train_dataset: Any, tmp_path: Path, core: str
) -> None:
    trainer, switch = CASES[core]
    if trainer == "GRPOTrainer":
        pairs = _grpo_mode_pairs(make_trainer, train_dataset, core, switch)
    else:
        pairs = _rloo_pairs(make_trainer, tiny_model, train_dataset, tmp_path, core, switch)
    _compare(pairs)


@pytest.mark.parametrize("config", ["GRPOConfig", "RLOOConfig"])
def test_groups_of_one_are_refused_by_trls_config(tmp_path: Path, config: str) -> None:
    """TRL refuses one generation per prompt for training in its configs (ValueError):
    the adapter's trainer is built from TRL's GRPOConfig, so the error is TRL's own."""
    cls = getattr(trl, config)
    with pytest.raises(ValueError, match="requires at least 2 generations per prompt"):
        cls(output_dir=str(tmp_path), use_cpu=True, num_generations=1, report_to="none")
