"""A third-party estimator (tests/plugin, installed by `make test-openrlhf`) in OpenRLHF:
``--algo.advantage.estimator advbudget_plugin_scaled_dr --advbudget.scale 3`` through
OpenRLHF's real parser, on real Experiences, and inside a Ray actor where only the
installed metadata (the entry point) can have brought it."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

pytest.importorskip("openrlhf")
# make's environments install tests/plugin (and require it: ADVBUDGET_REQUIRE)
plugin = pytest.importorskip("advbudget_example_plugin")

import torch  # noqa: E402

import advbudget.adapters.openrlhf as adapter  # noqa: E402
from advbudget.adapters.openrlhf.__main__ import main  # noqa: E402
from advbudget.adapters.openrlhf.testing import make_args, make_experiences, make_maker  # noqa: E402

from .conftest import OPENRLHF_WARNINGS  # noqa: E402

pytestmark = OPENRLHF_WARNINGS

NAME = "advbudget_plugin_scaled_dr"


def _expected(experiences, n: int, scale: float) -> dict[int, float]:  # type: ignore[no-untyped-def]
    """Prompt-major position -> the plugin's advantage."""
    rewards = [0.0] * sum(len(e.index) for e in experiences)
    for e in experiences:
        for position, reward in zip(e.index, e.rewards.tolist(), strict=True):
            rewards[position] = reward
    return dict(enumerate(plugin.expected(rewards, n, scale=scale)))


def test_parses_with_its_option() -> None:
    args = main(
        [
            "--advbudget.parse_only",
            "--actor.model_name_or_path", "Qwen/Qwen3-8B",
            "--algo.advantage.estimator", NAME,
            "--rollout.n_samples_per_prompt", "8",
            "--advbudget.scale", "3",
        ]
    )  # fmt: skip
    assert args.algo.advantage.estimator == NAME
    assert args.advbudget.scale == 3.0
    with pytest.raises(SystemExit, match="scale: expected a positive finite number, got -1"):
        main(
            [
                "--advbudget.parse_only",
                "--actor.model_name_or_path", "Qwen/Qwen3-8B",
                "--algo.advantage.estimator", NAME,
                "--rollout.n_samples_per_prompt", "8",
                "--advbudget.scale", "-1",
            ]
        )  # fmt: skip


def test_computes_its_numbers_on_real_experiences() -> None:
    experiences = make_experiences(6, 4, seed=2)
    args = make_args(NAME, 4)
    args.advbudget = SimpleNamespace(scale=3.0)
    out = adapter.compute_advantages_and_returns(make_maker(args), copy.deepcopy(experiences))
    expected = _expected(experiences, 4, 3.0)
    for e in out:
        last = e.action_mask.sum(-1) - 1  # no KL: the return is the advantage at every token
        got = e.advantages[torch.arange(len(e.index)), last].tolist()
        assert got == pytest.approx([expected[i] for i in e.index], abs=1e-6)
    assert any(abs(v) > 0 for v in expected.values())


def test_inside_a_ray_actor_from_the_entry_point() -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("Ray already initialised in this process")
    experiences = make_experiences(4, 4, seed=1)
    args = make_args(NAME, 4)
    args.advbudget = SimpleNamespace(scale=3.0)
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": adapter.HOOK},
    )
    try:

        @ray.remote
        class Trainer:
            def compute(self, args, experiences):  # type: ignore[no-untyped-def]
                import sys
                from types import SimpleNamespace

                from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
                from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

                assert "advbudget_example_plugin" not in sys.modules  # only the metadata
                maker = object.__new__(RemoteExperienceMaker)
                maker.strategy = SimpleNamespace(args=args)
                maker.args = args
                maker.advantage_estimator = args.algo.advantage.estimator
                maker.kl_ctl = FixedKLController(0.0)
                return maker.compute_advantages_and_returns(experiences)

        out = ray.get(
            Trainer.remote().compute.remote(args, copy.deepcopy(experiences)), timeout=120
        )  # type: ignore[attr-defined]
    finally:
        ray.shutdown()
    expected = _expected(experiences, 4, 3.0)
    for e in out:
        last = e.action_mask.sum(-1) - 1
        got = e.advantages[torch.arange(len(e.index)), last].tolist()
        assert got == pytest.approx([expected[i] for i in e.index], abs=1e-6)
