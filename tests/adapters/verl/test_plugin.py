"""A third-party estimator (tests/plugin, installed by `make test-verl`) in verl: found by
its ``advbudget.estimators`` entry point in a fresh process and inside a Ray actor, chosen
as ``algorithm.adv_estimator=advbudget_plugin_scaled_dr`` with its option from the config."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

verl = pytest.importorskip("verl")
# make's environments install tests/plugin (and require it: ADVBUDGET_REQUIRE)
plugin = pytest.importorskip("advbudget_example_plugin")

from advbudget.adapters.verl.testing import algorithm_config, make_batch  # noqa: E402

from .conftest import VERL_WARNINGS  # noqa: E402
from .test_estimators import run  # noqa: E402

pytestmark = VERL_WARNINGS

NAME = "advbudget_plugin_scaled_dr"


def _sequence(batch, advantages):  # type: ignore[no-untyped-def]
    """Per-token advantages back to one per response, in uid-group order."""
    mask = batch.batch["response_mask"]
    return (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)


@pytest.mark.parametrize("scale", [None, 3.0])
def test_selected_by_name_with_its_option(scale: float | None) -> None:
    batch = make_batch([4, 4, 4], seed=3, shuffle=False, constant_groups=1)
    options = {} if scale is None else {"scale": scale}
    advantages, returns = run(NAME, batch, algorithm_config(NAME, **options))
    assert advantages.equal(returns)
    rewards = batch.batch["token_level_rewards"].sum(-1).tolist()
    expected = plugin.expected(rewards, 4, scale=2.0 if scale is None else scale)
    got = _sequence(batch, advantages)
    empty = batch.batch["response_mask"].sum(-1) == 0
    assert not empty.any()
    assert got.tolist() == pytest.approx(expected, abs=1e-6)
    assert any(abs(v) > 0 for v in expected)  # the case is not trivial


def test_bad_option_names_the_option() -> None:
    batch = make_batch([2, 2], seed=1)
    with pytest.raises(ValueError, match="scale: expected a positive finite number, got -1"):
        run(NAME, batch, algorithm_config(NAME, scale=-1.0))


def test_inside_a_ray_actor_from_the_entry_points_alone() -> None:
    """In verl's TaskRunner (a Ray actor), nothing but installed metadata: verl.plugins
    imports the adapter, whose catalogue loads the advbudget.estimators entry point."""
    code = textwrap.dedent(
        f"""
        import warnings
        warnings.simplefilter("ignore")
        import ray
        # address="local": a fresh instance, never another Ray running on the machine
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
                 runtime_env={{"env_vars": {{"ADVBUDGET_VERL_TRAINERS": "0"}}}})

        @ray.remote(num_cpus=1)
        class TaskRunner:
            def advantages(self):
                import warnings
                warnings.simplefilter("ignore")
                import numpy as np
                import torch
                from omegaconf import OmegaConf
                from verl import DataProto
                from verl.trainer.ppo.ray_trainer import compute_advantage
                data = DataProto.from_dict(
                    tensors={{"token_level_rewards": torch.tensor([[0., 1.], [0., 0.], [0., 0.]]),
                              "response_mask": torch.ones(3, 2)}},
                    non_tensors={{"uid": np.array(["a", "a", "a"], dtype=object)}})
                config = OmegaConf.create({{"adv_estimator": "{NAME}",
                                            "norm_adv_by_std_in_grpo": True,
                                            "advbudget": {{"scale": 3.0}}}})
                out = compute_advantage(data, "{NAME}", config=config)
                return out.batch["advantages"][:, 0].tolist()

        print("advantages:", ray.get(TaskRunner.remote().advantages.remote()))
        ray.shutdown()
        """
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=environ
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(s for s in out.stdout.splitlines() if s.startswith("advantages:"))
    values = [float(v) for v in line.split(":", 1)[1].strip(" []").split(",")]
    assert values == pytest.approx(plugin.expected([1.0, 0.0, 0.0], 3, scale=3.0))


def test_hydra_composition_accepts_the_plugin_name() -> None:
    """verl's own config composition and validation take the name and the option."""
    from advbudget.adapters.verl.check_config import compose_config, validate

    from .test_registration import BASE_OVERRIDES

    extra = [f"algorithm.adv_estimator={NAME}", "+algorithm.advbudget.scale=3.0"]
    config = compose_config([*BASE_OVERRIDES, *extra])
    validate(config)
    assert config.algorithm.adv_estimator == NAME
    assert config.algorithm.advbudget.scale == 3.0


def test_registered_in_process_after_the_adapter_reaches_verl() -> None:
    """register_estimator in user code, after verl imported the adapter: verl has it too."""
    from verl.trainer.ppo import core_algos

    from advbudget import register_estimator

    @register_estimator("negated_dr")
    def negated_dr(grouped):  # type: ignore[no-untyped-def]
        mean = grouped.sum(grouped.gap) / grouped.count
        keep = grouped.xp.astype(grouped.kept(), grouped.gap.dtype)
        return -(grouped.gap - grouped.expand(mean)) * grouped.expand(keep)

    try:
        assert "advbudget_negated_dr" in core_algos.ADV_ESTIMATOR_REGISTRY
        batch = make_batch([2, 2], seed=0, shuffle=False)
        ours, _ = run("advbudget_negated_dr", batch, algorithm_config("advbudget_negated_dr"))
        dr, _ = run("advbudget_dr", batch, algorithm_config("advbudget_dr"))
        assert ours.tolist() == (-dr).tolist()
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("advbudget_negated_dr", None)
