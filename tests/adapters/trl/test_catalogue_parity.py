"""Parity of the catalogue's TRL estimators with TRL's own advantage code (1.13, 1.16), which is
only reachable inside a trainer step: a real GRPOTrainer (``scale_rewards`` "batch",
"group", "none") and a real RLOOTrainer (``normalize_advantages`` True and False) train
two steps; we record the gathered rewards (``_calculate_rewards``) and the advantages
``_generate_and_score_completions`` returns, and compare ours on the same rewards: the core
on the whole batch with TRL's conventions (``TRL.settings``), NaN rewards omitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from advbudget import compute_advantages  # noqa: E402
from advbudget.core import get_convention  # noqa: E402

from .conftest import TRL_WARNINGS  # noqa: E402

pytestmark = TRL_WARNINGS
TRL = get_convention("trl")


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


def _record(trainer: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(rewards, advantages) of every generation batch, as TRL computes them."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    rewards: list[torch.Tensor] = []
    calculate, generate = trainer._calculate_rewards, trainer._generate_and_score_completions

    def calculate_rewards(*args: Any, **kwargs: Any) -> Any:
        per_func = calculate(*args, **kwargs)
        total = (per_func * trainer.reward_weights.to(per_func.device)[None]).nansum(dim=1)
        total[torch.isnan(per_func).all(dim=1)] = torch.nan
        rewards.append(total.clone())
        return per_func

    def generate_and_score(*args: Any, **kwargs: Any) -> Any:
        out = generate(*args, **kwargs)
        seen.append((rewards[-1], out["advantages"].clone()))
        return out

    trainer._calculate_rewards = calculate_rewards
    trainer._generate_and_score_completions = generate_and_score
    return seen


def _compare(seen: list[tuple[torch.Tensor, torch.Tensor]], name: str, n: int) -> float:
    assert seen
    worst, nonzero = 0.0, 0
    for rewards, theirs in seen:
        ours = compute_advantages(
            rewards, name, group_size=n, nan_policy="omit", **TRL.settings(name)
        ).advantages
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        worst = max(worst, float((ours.double() - theirs.double()).abs().max()))
        nonzero += int(torch.count_nonzero(theirs))
    assert nonzero > 0  # the comparison is not between zeros
    return worst


@pytest.mark.parametrize(
    ("scale_rewards", "name"), [("batch", "grpo_batch_std"), ("group", "grpo"), ("none", "dr")]
)
def test_grpo_scale_rewards(make_trainer: Any, scale_rewards: str, name: str) -> None:
    trainer = make_trainer(
        reward_funcs=graded,
        config={"scale_rewards": scale_rewards, "max_steps": 2, "per_device_train_batch_size": 16},
    )
    seen = _record(trainer)
    trainer.train()
    _compare(seen, name, trainer.num_generations)


@pytest.mark.parametrize(("normalize", "name"), [(False, "rloo"), (True, "rloo_normalized")])
def test_rloo_trainer(
    tiny_model: Path, train_dataset: Any, tmp_path: Path, normalize: bool, name: str
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import RLOOTrainer

    from advbudget.testing.trl import rloo_config

    args = rloo_config(
        tmp_path / "out",
        per_device_train_batch_size=16,
        beta=0.0,  # no KL in the reward: the outcome rewards alone
        normalize_advantages=normalize,
    )
    trainer = RLOOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model),
        processing_class=AutoTokenizer.from_pretrained(tiny_model),
        reward_funcs=graded,
        args=args,
        train_dataset=train_dataset,
    )
    seen = _record(trainer)
    trainer.train()
    _compare(seen, name, trainer.num_generations)
