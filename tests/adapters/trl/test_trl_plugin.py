"""A third-party estimator (tests/plugin, installed by `make test-trl`) in TRL: its
entry point alone makes ``advantage_estimator="plugin_scaled_dr"`` train, with its option
through ``advantage_options``, in a process that never imported the plugin itself."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")
# make's environments install tests/plugin (and require it: ADVBUDGET_REQUIRE)
plugin = pytest.importorskip("advbudget_example_plugin")

from advbudget.adapters.trl import AdvBudgetGRPOTrainer  # noqa: E402

from .conftest import TRL_WARNINGS, length_parity_reward  # noqa: E402
from .test_trl_train import _capture  # noqa: E402

pytestmark = TRL_WARNINGS


def test_trains_by_name_with_its_option(make_trainer: Any) -> None:
    trainer = make_trainer(
        AdvBudgetGRPOTrainer,
        reward_funcs=length_parity_reward,
        config={"max_steps": 1},
        advantage_estimator="plugin_scaled_dr",
        advantage_options={"scale": 3.0},
    )
    seen = _capture(trainer)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    result = trainer.last_advantage_result
    assert result is not None
    assert result.estimator == "plugin_scaled_dr"
    rewards = result.grouped.groups.flat(result.grouped.rewards).tolist()
    expected = plugin.expected(rewards, 4, scale=3.0)
    assert result.advantages.tolist() == pytest.approx(expected, abs=1e-6)
    assert seen[0]["advantages"].tolist() == pytest.approx(expected, abs=1e-6)
    assert any(abs(v) > 0 for v in expected)
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_bad_option_fails_before_training(make_trainer: Any) -> None:
    with pytest.raises(ValueError, match="scale: expected a positive finite number, got 0"):
        make_trainer(
            AdvBudgetGRPOTrainer,
            advantage_estimator="plugin_scaled_dr",
            advantage_options={"scale": 0},
        )
    with pytest.raises(TypeError, match="budget: not an option of estimator 'plugin_scaled_dr'"):
        make_trainer(
            AdvBudgetGRPOTrainer,
            advantage_estimator="plugin_scaled_dr",
            advantage_options={"budget": 1.0},
        )


def test_found_from_metadata_in_a_fresh_process() -> None:
    code = textwrap.dedent(
        """
        from advbudget.core import get_spec
        from advbudget.adapters import get_convention
        assert "advbudget_example_plugin" not in __import__("sys").modules
        print(get_spec(get_convention("trl").core_name("plugin_scaled_dr")).reference)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "advbudget-example-plugin" in out.stdout


def test_estimators_with_optional_inputs_run_and_required_ones_are_refused(
    make_trainer: Any,
) -> None:
    """reinforce_baseline's token weights are optional (each completion weighs 1 in TRL);
    opo's response lengths are required, and TRL's reward step has none to give."""
    trainer = make_trainer(
        AdvBudgetGRPOTrainer, config={"max_steps": 1}, advantage_estimator="reinforce_baseline"
    )
    trainer.train()
    result = trainer.last_advantage_result
    assert result is not None
    assert result.estimator == "reinforce_baseline"
    assert abs(float(result.advantages.mean())) < 1e-5  # whitened over the batch
    with pytest.raises(ValueError, match=r"opo needs per-rollout inputs \(response_lengths\)"):
        make_trainer(AdvBudgetGRPOTrainer, advantage_estimator="opo")
