"""The patch: routes our estimator names, leaves OpenRLHF's own alone, reaches a Ray actor
through ``worker_process_setup_hook``."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("openrlhf")

import torch

import advbudget.adapters.openrlhf as adapter

from .conftest import OPENRLHF_WARNINGS, make_args, make_experiences, make_maker

pytestmark = OPENRLHF_WARNINGS


@pytest.fixture
def patched():  # type: ignore[no-untyped-def]
    adapter.install()
    yield
    adapter.uninstall()


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
    """With the hook the actor's process is patched; without it (the control) it is not."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("Ray already initialised in this process")
    ray.init(
        address="local",  # a fresh instance, never a cluster left running
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": adapter.HOOK} if hook else None,
    )
    try:

        @ray.remote
        class Probe:
            def installed(self) -> bool:
                import advbudget.adapters.openrlhf as inside

                return inside.is_installed()

        assert ray.get(Probe.remote().installed.remote(), timeout=120) is hook
    finally:
        ray.shutdown()
