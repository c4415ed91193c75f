"""The patch: routes our estimator names, leaves OpenRLHF's own alone, reaches a Ray actor
through ``worker_process_setup_hook``."""

from __future__ import annotations

import copy
import importlib
import inspect
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("openrlhf")

import torch

import advbudget
import advbudget.adapters.openrlhf as adapter
from advbudget.adapters.openrlhf._hooks import PATCHED
from advbudget.adapters.openrlhf.testing import make_args, make_experiences, make_maker

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

PACKAGE = Path(advbudget.__file__).resolve().parent


@pytest.fixture
def patched():  # type: ignore[no-untyped-def]
    adapter.install()
    yield
    adapter.uninstall()


def test_hook_imports_nothing_heavy_and_patches_on_import() -> None:
    """The hook runs at the start of every Ray worker: it must not import OpenRLHF's
    trainer (vLLM, DeepSpeed, transformers); the patch applies when OpenRLHF imports it."""
    script = (
        "import sys\n"
        "import advbudget.adapters.openrlhf as adapter\n"
        "adapter.install()\n"
        "heavy = [m for m in ('torch', 'openrlhf', 'vllm', 'deepspeed', 'transformers', 'ray')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "from openrlhf.trainer.ppo_trainer import BasePPOTrainer\n"
        "from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker\n"
        "assert hasattr(BasePPOTrainer.ppo_train, '_advbudget_original')\n"
        "assert hasattr(RemoteExperienceMaker.compute_advantages_and_returns,"
        " '_advbudget_original')\n"
        "print('patched on import')\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        capture_output=True, text=True, env=dict(os.environ), timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "patched on import" in out.stdout


def test_install_is_idempotent_and_reversible() -> None:
    adapter.install()
    adapter.install()
    assert adapter.is_installed()
    adapter.uninstall()
    assert not adapter.is_installed()
    adapter.uninstall()


@pytest.mark.usefixtures("patched")
def test_patched_method_routes_our_names() -> None:
    experiences = make_experiences(4, 8)
    maker = make_maker(make_args("reward_budget", 8), 0.05)
    out = maker.compute_advantages_and_returns(copy.deepcopy(experiences))
    expected = adapter.compute_advantages_and_returns(
        make_maker(make_args("reward_budget", 8), 0.05), copy.deepcopy(experiences)
    )
    for a, b in zip(out, expected, strict=True):
        assert torch.equal(a.advantages, b.advantages)


@pytest.mark.usefixtures("patched")
def test_patched_method_leaves_openrlhf_names_alone() -> None:
    experiences = make_experiences(4, 8)
    maker = make_maker(make_args("group_norm", 8), 0.05)
    out = maker.compute_advantages_and_returns(copy.deepcopy(experiences))
    adapter.uninstall()
    reference = make_maker(make_args("group_norm", 8), 0.05).compute_advantages_and_returns(
        copy.deepcopy(experiences)
    )
    adapter.install()
    for a, b in zip(out, reference, strict=True):
        assert torch.equal(a.advantages, b.advantages)


def test_our_estimator_needs_groups() -> None:
    maker = make_maker(make_args("reward_budget", 1), 0.0)
    with pytest.raises(ValueError, match="n_samples_per_prompt > 1"):
        adapter.compute_advantages_and_returns(maker, make_experiences(4, 1, constant_groups=0))


@pytest.mark.parametrize("hook", [True, False])
def test_hook_reaches_a_ray_actor(hook: bool) -> None:
    """With the hook, an actor's ``RemoteExperienceMaker`` computes our advantages (equal to
    the in-process ones) and ships each experience compactly; without it (the control)
    OpenRLHF's own method runs and rejects the name."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("Ray already initialised in this process")
    experiences = make_experiences(8, 8, micro_batch=3)
    args = make_args("reward_budget", 8)
    expected = adapter.compute_advantages_and_returns(
        make_maker(args, 0.05), copy.deepcopy(experiences)
    )
    runtime_env = {"env_vars": {"RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1"}}
    if hook:
        runtime_env["worker_process_setup_hook"] = adapter.HOOK
    ray.init(
        address="local",  # a fresh instance, never a cluster left running
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env=runtime_env,
    )
    try:

        @ray.remote
        class Trainer:
            """Where OpenRLHF computes advantages: a Ray actor (its PPOTrainer)."""

            def installed(self) -> bool:
                import advbudget.adapters.openrlhf as inside

                return inside.is_installed()

            def compute(self, args, experiences):  # type: ignore[no-untyped-def]
                from types import SimpleNamespace

                from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
                from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
                from ray._private.worker import global_worker

                maker = object.__new__(RemoteExperienceMaker)
                maker.strategy = SimpleNamespace(args=args)
                maker.args = args
                maker.advantage_estimator = args.algo.advantage.estimator
                maker.kl_ctl = FixedKLController(0.05)
                out = maker.compute_advantages_and_returns(experiences)
                context = global_worker.get_serialization_context()
                shipped = [context.serialize(e).total_bytes for e in out]
                return out, shipped

        actor = Trainer.remote()  # type: ignore[attr-defined]
        assert ray.get(actor.installed.remote(), timeout=120) is hook
        if not hook:
            with pytest.raises(ray.exceptions.RayTaskError):
                ray.get(actor.compute.remote(args, copy.deepcopy(experiences)), timeout=120)
            return
        out, shipped = ray.get(actor.compute.remote(args, copy.deepcopy(experiences)), timeout=120)
    finally:
        ray.shutdown()
    for a, b, size in zip(out, expected, shipped, strict=True):
        assert torch.equal(a.advantages, b.advantages)
        assert torch.equal(a.returns, b.returns)
        assert a.info["advbudget/advantage_mean"] == b.info["advbudget/advantage_mean"]
        # Each experience carries its own elements, not the batch's (~90 KB here).
        own = sum(t.numel() * t.element_size() for t in (a.advantages, a.returns, a.rewards))
        assert size < own + 8_000


@pytest.mark.parametrize("zero_copy", [True, False])
def test_experiences_never_share_batch_storage_unless_ray_ships_views(
    zero_copy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Ray's zero-copy tensor serialisation every tensor owns its storage (a view
    would be pickled with the whole batch tensor); with it, views are contiguous."""
    from ray._private import ray_constants

    monkeypatch.setattr(ray_constants, "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", zero_copy)
    out = adapter.compute_advantages_and_returns(
        make_maker(make_args("reward_budget", 8), 0.05), make_experiences(8, 8, micro_batch=3)
    )
    for e in out:
        tensors = [e.advantages, e.returns, *(e.info[k] for k in ("group_reward_std", "return"))]
        for t in tensors:
            assert t.is_contiguous()
            owns = t.untyped_storage().nbytes() == t.numel() * t.element_size()
            assert owns or zero_copy
        assert e.advantages.untyped_storage().data_ptr() != e.returns.untyped_storage().data_ptr()


def _ours(value: object) -> bool:
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    # a wrapper copies OpenRLHF's __module__ and __name__, not its code
    return isinstance(code, types.CodeType) and Path(code.co_filename).is_relative_to(PACKAGE)


def test_install_patches_exactly_the_recorded_targets() -> None:
    """Every function or method of an OpenRLHF module or class that is ours once the patch
    is installed is a record of ``PATCHED``, and none is left after ``uninstall``."""
    modules = sorted({hook.module for hook in PATCHED})

    def foreign() -> set[str]:
        found = set()
        for name, module in list(sys.modules.items()):
            if not name.startswith("openrlhf.") or module is None:
                continue
            owners = [("", module)] + [
                (f"{key}.", value)
                for key, value in vars(module).items()
                if inspect.isclass(value) and value.__module__ == name
            ]
            for prefix, owner in owners:
                found |= {
                    f"{name}:{prefix}{key}" for key, value in vars(owner).items() if _ours(value)
                }
        return found

    adapter.install()
    try:
        for name in modules:
            importlib.import_module(name)
        patched = foreign()
    finally:
        adapter.uninstall()
    assert patched == {hook.name for hook in PATCHED}
    assert foreign() == set()
