"""The staleness rule in verl's async trainers (``+algorithm.advbudget.max_staleness``,
``stale_rollouts``): verl's own advantage step of the async trainers
(``SeparateRayPPOTrainer``'s, run on a stand-in ``self`` of the real trainer class) with a
``DataProto`` whose rollouts carry verl's weights labels (``max_global_steps``), our
estimator applying the rule, and the ``advbudget/*`` metrics in the trainer's step metrics.

One process, no Ray; the real async loop is in ``test_async_loop.py``.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest

pytest.importorskip("verl")

import torch

from advbudget import compute_advantages
from advbudget.adapters._features import lend_versions
from advbudget.adapters.verl._estimators import core_settings
from advbudget.adapters.verl._options import read_options
from advbudget.adapters.verl._staleness import SYNC_STALENESS_REFUSED
from advbudget.adapters.verl.testing import algorithm_config, make_batch
from advbudget.metrics import advantage_metrics

from .conftest import VERL_WARNINGS

pytestmark = VERL_WARNINGS

SIZES = (4, 4, 4, 4)
ROWS = sum(SIZES)


def _classes() -> dict[str, type]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
        from verl.experimental.one_step_off_policy.ray_trainer import OneStepOffRayTrainer
    # FullyAsyncTrainer is Ray's actor class: the trainer Ray makes is its modified class.
    return {
        "fully_async": FullyAsyncTrainer.__ray_metadata__.modified_class,
        "one_step_off": OneStepOffRayTrainer,
    }


def _trainer(kind: str, estimator: str, label: int, **options: Any) -> Any:
    """A stand-in ``self`` of verl's trainer ``kind`` (its class, no __init__): what its
    advantage step reads. ``label``: fully_async's current_param_version, one_step_off's
    global_steps."""
    from omegaconf import OmegaConf

    trainer = object.__new__(_classes()[kind])
    algorithm = OmegaConf.to_container(algorithm_config(estimator, **options))
    algorithm.update(use_kl_in_reward=False, rollout_correction=None)  # type: ignore[union-attr]
    trainer.config = OmegaConf.create(
        {"algorithm": algorithm, "actor_rollout_ref": {"rollout": {"n": SIZES[0]}}}
    )
    trainer.metrics, trainer.timing_raw, trainer.reward_extra_infos_dict = {}, {}, {}
    trainer.global_steps = label
    if kind == "fully_async":
        trainer.current_param_version = label
    return trainer


def _step(trainer: Any, labels: list[Any] | None, seed: int = 0) -> Any:
    """verl's async advantage step over a batch whose rollouts carry ``labels``."""
    from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer

    batch = make_batch(SIZES, seed=seed, shuffle=False)
    trainer.reward_tensor = batch.batch.pop("token_level_rewards")
    if labels is not None:
        batch.non_tensor_batch["max_global_steps"] = np.array(labels, dtype=object)
    return SeparateRayPPOTrainer._fit_compute_advantage(trainer, batch)


def _expected(out: Any, config: Any, versions: list[int], current: int) -> Any:
    """The core's result for the batch, with ``versions`` and ``current``."""
    core, settings = core_settings("reward_budget", config)
    options = read_options(config)
    rewards = out.batch["token_level_rewards"].sum(-1).double().numpy()
    return compute_advantages(
        rewards,
        core,
        group_ids=out.non_tensor_batch["uid"],
        **settings,
        **options.staleness_keywords(versions, current),
    )


def _sequence(out: Any) -> np.ndarray:
    """Each row's advantage (the same on every response token; 0 on an empty row)."""
    advantages, mask = out.batch["advantages"].double(), out.batch["response_mask"]
    return ((advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)).numpy()


# Each group a mix of versions 3..5 (fully_async: syncs), the trainer at 5.
LABELS = [5, 5, 4, 3, 5, 4, 4, 4, 3, 3, 5, 5, 5, 5, 5, 5]


@pytest.mark.parametrize("rule", ["keep", "baseline_only", "drop", "drop_group"])
def test_fully_async_each_rule_is_the_cores(rule: str) -> None:
    trainer = _trainer(
        "fully_async", "reward_budget", 5, max_staleness=1, stale_rollouts=rule, budget=0.5
    )
    out = _step(trainer, LABELS)
    expected = _expected(out, trainer.config.algorithm, LABELS, 5)
    np.testing.assert_allclose(_sequence(out), expected.advantages, rtol=0, atol=1e-6)
    stale = np.array(LABELS) < 4
    if rule != "keep":  # stale rows: advantage 0 on every token (no policy gradient)
        assert not out.batch["advantages"][torch.from_numpy(stale)].any()
    metrics = advantage_metrics(expected)
    for name in ("staleness_mean", "staleness_max", "stale_fraction"):
        assert trainer.metrics[f"advbudget/{name}"] == pytest.approx(metrics[name])
    assert trainer.metrics["advbudget/stale_fraction"] == pytest.approx(stale.mean())
    assert trainer.metrics["advbudget/mixed_version_group_fraction"] == pytest.approx(0.75)


def test_fully_async_keep_is_measured_and_changes_nothing() -> None:
    """Without options the versions are still read: the staleness metrics, the advantages
    of the plain estimator."""
    trainer = _trainer("fully_async", "reward_budget", 5)
    out = _step(trainer, LABELS)
    plain = _trainer("fully_async", "reward_budget", 5)
    np.testing.assert_array_equal(_sequence(out), _sequence(_step(plain, None)))
    assert trainer.metrics["advbudget/staleness_max"] == 2.0
    assert trainer.metrics["advbudget/stale_fraction"] == 0.0  # no max_staleness: none stale
    assert "advbudget/staleness_max" not in plain.metrics  # no labels: no staleness keys
    assert "advbudget/valid_fraction" in plain.metrics


@pytest.mark.parametrize(("step", "staleness"), [(1, 0.0), (2, 1.0), (3, 1.0)])
def test_one_step_off_labels_are_updates(step: int, staleness: float) -> None:
    """one_step_off labels the weights with global_steps before the step's update, and the
    first weights twice (0, 1): a batch of step k, labelled k - 1, is 1 update behind,
    except at step 1 (0 behind)."""
    trainer = _trainer(
        "one_step_off", "reward_budget", step, max_staleness=0, stale_rollouts="baseline_only"
    )
    out = _step(trainer, [step - 1] * ROWS)
    assert trainer.metrics["advbudget/staleness_max"] == staleness
    assert trainer.metrics["advbudget/stale_fraction"] == staleness
    versions, current = [max(step - 2, 0)] * ROWS, step - 1
    expected = _expected(out, trainer.config.algorithm, versions, current)
    np.testing.assert_allclose(_sequence(out), expected.advantages, rtol=0, atol=1e-6)
    assert bool(out.batch["advantages"].any()) == (staleness == 0.0)


def test_verls_own_estimator_is_left_alone() -> None:
    trainer = _trainer("fully_async", "grpo", 5)
    _step(trainer, LABELS)
    assert not any(key.startswith("advbudget/") for key in trainer.metrics)


def test_lent_versions_come_before_the_trainers() -> None:
    from verl.trainer.ppo.ray_trainer import compute_advantage

    config = algorithm_config("reward_budget", max_staleness=0, stale_rollouts="drop")
    batch = make_batch(SIZES, shuffle=False)
    versions = [0] * 8 + [1] * 8
    with lend_versions(read_options(config), versions, 1):
        out = compute_advantage(batch, adv_estimator="reward_budget", config=config)
    assert not out.batch["advantages"][:8].any()
    assert out.batch["advantages"][8:].any()


def _one_line(start: str) -> str:
    """A ``match`` for a one-line message that starts with ``start``."""
    return rf"^{re.escape(start)}[^\n]+$"


def test_max_staleness_without_versions_is_refused_in_one_line() -> None:
    from verl.trainer.ppo.ray_trainer import compute_advantage

    config = algorithm_config("reward_budget", max_staleness=1)
    start = "algorithm.advbudget.max_staleness: not available here: "
    with pytest.raises(ValueError, match=_one_line(start)) as error:  # verl's sync trainers'
        compute_advantage(make_batch(SIZES), adv_estimator="reward_budget", config=config)
    assert str(error.value).endswith(SYNC_STALENESS_REFUSED)
    trainer = _trainer("fully_async", "reward_budget", 5, max_staleness=1)
    start = "algorithm.advbudget.max_staleness: not available here (FullyAsyncTrainer: "
    with pytest.raises(ValueError, match=_one_line(start)):  # an agent loop that labels none
        _step(trainer, [None] * ROWS)


def test_a_missing_label_is_refused_in_one_line() -> None:
    trainer = _trainer("fully_async", "reward_budget", 5)
    start = "non_tensor_batch['max_global_steps']: expected each rollout's weights label "
    with pytest.raises(ValueError, match=_one_line(start)):
        _step(trainer, [5] * (ROWS - 1) + [None])


def test_the_advbudget_trainer_modes_refuse_max_staleness_at_start() -> None:
    """verl's v1 trainer hands no versions: refused before any model loads."""
    from omegaconf import OmegaConf

    from advbudget.adapters.verl._hooks import trainer_registry

    trainer_class = trainer_registry()["advbudget_sync"]
    config = OmegaConf.create(
        {
            "algorithm": OmegaConf.to_container(
                algorithm_config("reward_budget", max_staleness=2, stale_rollouts="drop")
            ),
            "trainer": {"v1": {"trainer_mode": "advbudget_sync"}},
        }
    )
    start = "algorithm.advbudget.max_staleness: not available here: the adapter reads "
    with pytest.raises(ValueError, match=_one_line(start)):
        trainer_class(config)
