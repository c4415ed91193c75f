"""An estimator with memory (spo, rae) in OpenRLHF: the patched advantage step keys its
state by each sample's prompt text, the state rides in the checkpoint's ``client_states``
(the real ``BasePPOTrainer.save_logs_and_checkpoints`` / ``init_checkpoint_states``, torch
round trip), and a resumed run's next advantages are those of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("ray")


from advbudget import EstimatorState, compute_advantages
from advbudget.adapters.openrlhf._estimators import run_memory
from advbudget.adapters.openrlhf._hooks import MEMORY_STATE
from advbudget.adapters.openrlhf.testing import make_args, make_experiences, make_maker

from .conftest import OPENRLHF_WARNINGS
from .test_ledger import EPOCHS, ActorGroup, N, advantage_step, trainer

pytestmark = OPENRLHF_WARNINGS


def step(
    maker: Any, table: dict[str, list[float]], seed: int
) -> tuple[list[str], list[float], list[float]]:
    """One batch through the patched step (samples shuffled across micro-batches): each
    sample's prompt, reward and sequence advantage (no KL: the advantage of every token)."""
    experiences = advantage_step(maker, table, seed)
    prompts = [p for e in experiences for p in e.prompts]
    rewards = [float(r) for e in experiences for r in e.rewards]
    advantages = [
        float(a[m.bool()][0])
        for e in experiences
        for a, m in zip(e.advantages, e.action_mask, strict=True)
    ]
    return prompts, rewards, advantages


@pytest.mark.parametrize("estimator", ["advbudget_spo", "advbudget_rae"])
def test_memory_keyed_by_prompt_saved_and_resumed(
    local_ray: None, tmp_path: Path, estimator: str
) -> None:
    core = estimator.removeprefix("advbudget_")
    whole = trainer(tmp_path / "whole", ActorGroup(), estimator)
    state = EstimatorState()
    seen = []
    for seed, table in enumerate(EPOCHS):
        prompts, rewards, advantages = step(whole.experience_maker, table, seed)
        seen.append(advantages)
        # The step's advantages are the core's on one state fed the same samples.
        expected = compute_advantages(
            np.array(rewards), core, group_size=1, prompt_ids=prompts, state=state
        ).advantages
        np.testing.assert_allclose(advantages, expected, rtol=1e-6, atol=1e-6)
    assert run_memory(whole.experience_maker).estimator_state.state_dict() == state.state_dict()

    group = ActorGroup()
    first = trainer(tmp_path / "parts", group, estimator)
    for seed, table in enumerate(EPOCHS[:2]):
        step(first.experience_maker, table, seed)
    first.save_logs_and_checkpoints(2, {}, {"global_step": 2})
    resumed = trainer(tmp_path / "parts", group, estimator)
    states = resumed.init_checkpoint_states()
    assert states[MEMORY_STATE]["estimator_state"]["estimator"] == core
    _, _, advantages = step(resumed.experience_maker, EPOCHS[2], 2)
    np.testing.assert_allclose(advantages, seen[2], rtol=1e-12, atol=1e-12)
    # Without the restore, the third batch is a first sighting: other advantages.
    fresh = trainer(tmp_path / "fresh", ActorGroup(), estimator)
    assert not np.allclose(step(fresh.experience_maker, EPOCHS[2], 2)[2], seen[2])


def test_memory_refuses_resample_and_needs_prompt_texts(local_ray: None) -> None:
    args = make_args("advbudget_spo", N, advbudget={"skipped_groups": "resample"})
    with pytest.raises(ValueError, match=r"--advbudget\.skipped_groups: estimator .spo. remembers"):
        step(make_maker(args), EPOCHS[0], 0)
    maker = make_maker(make_args("advbudget_rae", N))
    experiences = make_experiences(4, N)
    with pytest.raises(ValueError, match=r"prompt_ids: .* no prompt text"):
        maker.compute_advantages_and_returns(experiences)
