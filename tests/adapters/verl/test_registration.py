"""Registration where verl computes advantages: fresh interpreters, a Ray actor, hydra."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")

from .conftest import VERL_WARNINGS  # noqa: E402

pytestmark = VERL_WARNINGS

# What a fresh process prints once `import verl` has run its hooks.
PROBE = textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("ignore")
    import verl
    from verl.trainer.ppo import core_algos
    names = ("reward_budget", "advbudget_grpo", "advbudget_dr", "advbudget_rloo",
             "advbudget_budget", "advbudget_group_norm")
    print("registered:", ",".join(n for n in names if n in core_algos.ADV_ESTIMATOR_REGISTRY))
    """
)
ALL = (
    "registered: reward_budget,advbudget_grpo,advbudget_dr,advbudget_rloo,"
    "advbudget_budget,advbudget_group_norm"
)


def run_fresh(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "ADVBUDGET_VERL_TRAINERS": "0", **env}
    environ.pop("VERL_USE_EXTERNAL_MODULES", None)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120
    )


def plugin_dist(tmp_path: Path, module: str = "advbudget.adapters.verl") -> Path:
    """A dist-info declaring the ``verl.plugins`` entry point, as pyproject will."""
    dist = tmp_path / "advbudget_verl_plugin-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: advbudget-verl-plugin\n")
    (dist / "entry_points.txt").write_text(f"[verl.plugins]\nadvbudget = {module}\n")
    return tmp_path


def test_not_registered_without_a_hook() -> None:
    """The control: with plugins off and no module named, nothing is registered (unless
    advbudget's own metadata already declares the entry point, which plugins=none stops)."""
    out = run_fresh(PROBE, VERL_USE_EXTERNAL_PLUGINS="none")
    assert out.returncode == 0, out.stderr
    assert "registered: \n" in out.stdout


def test_environment_variable() -> None:
    out = run_fresh(
        PROBE,
        VERL_USE_EXTERNAL_PLUGINS="none",
        VERL_USE_EXTERNAL_MODULES="advbudget.adapters.verl",
    )
    assert out.returncode == 0, out.stderr
    assert ALL in out.stdout


def test_entry_point(tmp_path: Path) -> None:
    path = plugin_dist(tmp_path)
    out = run_fresh(PROBE, PYTHONPATH=f"{path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert out.returncode == 0, out.stderr
    assert ALL in out.stdout


def test_entry_point_from_package_metadata() -> None:
    """advbudget's own metadata declares the plugin (pyproject's verl.plugins entry point)."""
    from importlib.metadata import entry_points

    declared = [ep for ep in entry_points(group="verl.plugins") if ep.value == verl_module()]
    assert any(ep.dist is not None and ep.dist.name == "advbudget" for ep in declared), (
        'advbudget\'s installed metadata declares no [project.entry-points."verl.plugins"] '
        'advbudget = "advbudget.adapters.verl" (an editable install older than pyproject?)'
    )
    out = run_fresh(PROBE)
    assert ALL in out.stdout, out.stderr


def verl_module() -> str:
    return "advbudget.adapters.verl"


def test_failure_is_loud(tmp_path: Path) -> None:
    """verl swallows plugin errors; ours still says what went wrong on stderr."""
    (tmp_path / "squatter.py").write_text(
        "from verl.trainer.ppo import core_algos\n"
        "core_algos.register_adv_est('reward_budget')(lambda **kw: None)\n"
    )
    path = plugin_dist(tmp_path)
    out = run_fresh(
        PROBE,
        PYTHONPATH=f"{path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        VERL_USE_EXTERNAL_MODULES="squatter",
    )
    assert out.returncode == 0  # verl itself carries on
    assert "advbudget: registering the verl advantage estimators failed" in out.stderr
    assert "Unknown advantage estimator" in out.stderr


def test_inside_a_ray_actor() -> None:
    """Where verl computes advantages: a Ray actor, reached through runtime_env."""
    ray = pytest.importorskip("ray")
    code = textwrap.dedent(
        """
        import warnings
        warnings.simplefilter("ignore")
        import ray
        # address="local": a fresh instance, never another Ray running on the machine
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {
                     "VERL_USE_EXTERNAL_MODULES": "advbudget.adapters.verl",
                     "VERL_USE_EXTERNAL_PLUGINS": "none",
                     "ADVBUDGET_VERL_TRAINERS": "0"}})

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
                    tensors={"token_level_rewards": torch.tensor([[0., 1.], [0., 0.], [1., 0.]]),
                             "response_mask": torch.ones(3, 2)},
                    non_tensors={"uid": np.array(["a", "a", "a"], dtype=object)})
                config = OmegaConf.create({"adv_estimator": "reward_budget",
                                           "norm_adv_by_std_in_grpo": True})
                out = compute_advantage(data, "reward_budget", config=config)
                return out.batch["advantages"][:, 0].tolist()

        print("advantages:", ray.get(TaskRunner.remote().advantages.remote()))
        ray.shutdown()
        """
    )
    del ray
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(s for s in out.stdout.splitlines() if s.startswith("advantages:"))
    values = [float(v) for v in line.split(":", 1)[1].strip(" []").split(",")]
    # rewards 1, 0, 1 with B = 1: gaps 1, 0, 1 -> 0.5, 0, 0.5, minus 1/3
    assert values == pytest.approx([1 / 6, -1 / 3, 1 / 6])


BASE_OVERRIDES = [
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
]


@pytest.mark.parametrize(
    "extra",
    [
        ["algorithm.adv_estimator=reward_budget", "+algorithm.advbudget.budget=0.5"],
        ["algorithm.adv_estimator=advbudget_grpo", "algorithm.norm_adv_by_std_in_grpo=false"],
        ["algorithm.adv_estimator=reward_budget", "trainer.v1.trainer_mode=advbudget_sync"],
    ],
)
def test_hydra_composition_passes_verl_validation(extra: list[str]) -> None:
    from advbudget.adapters.verl.check_config import compose_config, validate

    config = compose_config([*BASE_OVERRIDES, *extra])
    validate(config)
    assert config.algorithm.adv_estimator == extra[0].split("=")[1]
    if extra[1].startswith("+algorithm.advbudget.budget"):
        assert config.algorithm.advbudget.budget == 0.5


def test_hydra_composition_rejects_unknown_names() -> None:
    from advbudget.adapters.verl.check_config import compose_config, validate

    with pytest.raises(ValueError, match="Unknown advantage estimator"):
        validate(compose_config([*BASE_OVERRIDES, "algorithm.adv_estimator=no_such"]))
    bad_mode = compose_config(
        [*BASE_OVERRIDES, "algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=advbudget_nope"]
    )
    with pytest.raises(ValueError, match=r"trainer\.v1\.trainer_mode"):
        validate(bad_mode)
