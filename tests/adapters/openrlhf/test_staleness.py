"""Stale samples in OpenRLHF: the policy version of each sample, from the weights the
trainer sent to the engines to the stamp the generator puts on each sample and the rule the
advantage step applies (``--advbudget.max_staleness``, ``--advbudget.stale_rollouts``);
and the outcome beside a shaped reward (``scores``), for
``advbudget/outcome_disagreement_group_fraction``.

One process, no Ray: the version lives in :mod:`~advbudget.adapters.openrlhf._policy_versions`
itself. The real async loop (two Ray actors, the vLLM lock) is in ``test_loop.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openrlhf")

import torch

import advbudget.adapters.openrlhf as adapter
from advbudget import compute_advantages
from advbudget.adapters.openrlhf import _hooks, _policy_versions
from advbudget.adapters.openrlhf.__main__ import validate
from advbudget.adapters.openrlhf.testing import make_args, make_experiences, make_maker
from advbudget.metrics import advantage_metrics

from .conftest import OPENRLHF_WARNINGS

pytestmark = OPENRLHF_WARNINGS

N = 4
PROMPTS = 6
KEY = _policy_versions.VERSION_KEY


@pytest.fixture(autouse=True)
def versions_reset() -> Iterator[None]:
    yield
    _policy_versions.publish(0)


def _run(flags: dict[str, Any], experiences: list[Any], current: int) -> list[Any]:
    maker = make_maker(make_args("reward_budget", N, advbudget=flags))
    _policy_versions.publish(current)
    installed = adapter.is_installed()
    adapter.install()
    try:
        with torch.no_grad():
            return list(type(maker).compute_advantages_and_returns(maker, experiences))
    finally:
        if not installed:
            adapter.uninstall()


def _stamped(versions: np.ndarray) -> list[Any]:
    """The test's experiences, each sample stamped with ``versions[slot]``."""
    experiences = make_experiences(PROMPTS, N, constant_groups=0)
    for experience in experiences:
        experience.info[KEY] = torch.as_tensor(versions[experience.index], dtype=torch.int64)
    return experiences


def _by_slot(experiences: list[Any], name: str) -> np.ndarray:
    values = np.zeros(PROMPTS * N)
    for experience in experiences:
        if name == "advantages":  # the sequence advantage: on the first action token
            values[experience.index] = experience.advantages[:, 0].double().numpy()
        else:  # our metrics: one float per sample
            values[experience.index] = np.asarray(experience.info[name], dtype=np.float64)
    return values


def _versions(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, 6, PROMPTS * N)  # current: 5


@pytest.mark.parametrize("rule", ["keep", "baseline_only", "drop", "drop_group"])
def test_each_rule_gives_the_core_s_advantages_of_the_stamped_versions(rule: str) -> None:
    versions = _versions()
    experiences = _stamped(versions)
    rewards = np.zeros(PROMPTS * N)
    for experience in experiences:
        rewards[experience.index] = experience.rewards.double().numpy()
    out = _run({"max_staleness": "1", "stale_rollouts": rule}, experiences, current=5)
    expected = compute_advantages(
        rewards, "budget", group_size=N, policy_versions=versions, current_version=5,
        max_staleness=1, stale_rollouts=rule,
    )  # fmt: skip
    got = _by_slot(out, "advantages")
    np.testing.assert_allclose(got, expected.advantages, rtol=1e-6, atol=1e-7)
    stale = 5 - versions > 1
    assert stale.any()
    assert (~stale).any()
    if rule != "keep":
        assert np.all(got[stale] == 0)
    metrics = advantage_metrics(expected)
    for name in ("staleness_mean", "staleness_max", "stale_fraction", "valid_fraction"):
        logged = _by_slot(out, f"advbudget/{name}")
        assert logged.mean() == pytest.approx(metrics[name], rel=1e-12), name
    assert all(KEY not in experience.info for experience in out)  # not logged as a metric


def test_without_a_rule_the_lag_is_measured_and_nothing_changes() -> None:
    versions = _versions(1)
    plain = _run({}, make_experiences(PROMPTS, N, constant_groups=0), current=5)
    measured = _run({}, _stamped(versions), current=5)
    np.testing.assert_array_equal(_by_slot(measured, "advantages"), _by_slot(plain, "advantages"))
    assert _by_slot(measured, "advbudget/staleness_max")[0] == (5 - versions).max()
    assert "advbudget/staleness_mean" not in plain[0].info


def test_a_rule_without_stamps_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^--advbudget.max_staleness: the samples carry no"):
        _run({"max_staleness": "0"}, make_experiences(PROMPTS, N), current=1)
    partly = _stamped(_versions())
    del partly[0].info[KEY]
    with pytest.raises(ValueError, match=r"^experiences: 1 of \d+ carry no policy version"):
        _run({}, partly, current=5)


def test_a_version_newer_than_the_weights_is_refused() -> None:
    with pytest.raises(ValueError, match="policy_versions"):
        _run({}, _stamped(_versions()), current=4)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"stale_rollouts": "drop"}, "none is stale without --advbudget.max_staleness"),
        ({"max_staleness": "-1"}, "--advbudget.max_staleness: expected an int >= 0"),
        ({"max_staleness": "1", "stale_rollouts": "old"}, "--advbudget.stale_rollouts:"),
    ],
)
def test_the_launcher_refuses_bad_flags_before_ray_starts(
    flags: dict[str, str], message: str
) -> None:
    flat = SimpleNamespace(**{"algo.advantage.estimator": "reward_budget"})
    for name, value in flags.items():
        setattr(flat, f"advbudget.{name}", value)
    with pytest.raises(SystemExit, match=message):
        validate(flat)


class _Trainer:
    """The parts of OpenRLHF's trainer the version wrappers read."""

    def __init__(self) -> None:
        self.args = make_args("reward_budget", N)
        self.sent: list[int] = []


def test_the_trainer_publishes_the_version_of_the_weights_it_sends() -> None:
    trainer = _Trainer()

    def broadcast(self: Any) -> None:
        self.sent.append(_policy_versions.published())  # before ours publishes

    def ppo_train(self: Any, global_steps: int) -> dict[str, Any]:
        return {}

    def init_checkpoint_states(self: Any) -> dict[str, Any]:
        return {"global_step": 7}

    send = _hooks._WRAPPERS["broadcast_to_vllm"](broadcast)
    resume = _hooks._WRAPPERS["init_checkpoint_states"](init_checkpoint_states)
    resume(trainer)
    send(trainer)  # a resumed run sends its weights first
    assert _policy_versions.published() == 7
    _policy_versions.set_weights_version(trainer, 7)
    step = _hooks._WRAPPERS["ppo_train"](ppo_train)
    trainer.experience_maker = make_maker(trainer.args)
    step(trainer, 7)  # train_step(7): update 8
    send(trainer)
    assert _policy_versions.published() == 8
    assert trainer.sent == [0, 7]


def test_the_generator_stamps_the_version_it_generates_with() -> None:
    generated = make_experiences(2, N, micro_batch=1)

    def generate(self: Any, dataloader_iter: Any, num_prompts: int, dynamic_filtering: Any,
                 **kwargs: Any) -> Any:  # fmt: skip
        return generated, 2, False

    wrapped = _hooks._WRAPPERS["_generate_vllm"](generate)
    _policy_versions.publish(3)
    generator = SimpleNamespace(args=make_args("reward_budget", N))
    out, consumed, exhausted = wrapped(generator, None, 2, False)
    assert (consumed, exhausted) == (2, False)
    assert [e.info[KEY].tolist() for e in out] == [[3]] * len(generated)
    theirs = make_experiences(2, N, micro_batch=1)
    wrapped = _hooks._WRAPPERS["_generate_vllm"](lambda *a, **k: (theirs, 2, False))
    wrapped(SimpleNamespace(args=make_args("group_norm", N)), None, 2, False)
    assert all(KEY not in e.info for e in theirs)  # OpenRLHF's own estimators: untouched


def test_an_overriding_broadcast_keeps_its_own_and_reaches_ours_through_super() -> None:
    """The async TrainingActor overrides broadcast_to_vllm (its vLLM lock around the base
    method): the instance binding must not shadow it with the base's."""
    module = pytest.importorskip("openrlhf.trainer.ppo_trainer")

    class Locked(module.BasePPOTrainer):
        def broadcast_to_vllm(self) -> None:
            super().broadcast_to_vllm()

    installed = adapter.is_installed()
    adapter.install()
    try:
        trainer = object.__new__(Locked)
        _hooks.bind_ppo_train(trainer)
        assert "broadcast_to_vllm" not in vars(trainer)  # Locked's own runs
        base = vars(module.BasePPOTrainer)["broadcast_to_vllm"]
        assert hasattr(base, "_advbudget_original")  # what its super() call reaches
    finally:
        if not installed:
            adapter.uninstall()


def test_outcomes_beside_shaped_rewards_are_compared_group_by_group() -> None:
    experiences = make_experiences(PROMPTS, N, constant_groups=0)
    rewards = np.zeros(PROMPTS * N)
    for experience in experiences:
        rewards[experience.index] = experience.rewards.double().numpy()
    outcome = np.where(np.arange(PROMPTS * N) // N < 2, 0.0, rewards)  # 2 groups all failed
    for experience in experiences:
        experience.scores = torch.as_tensor(outcome[experience.index], dtype=torch.float32)
    out = _run({}, experiences, current=0)
    expected = advantage_metrics(
        compute_advantages(rewards, "budget", group_size=N), outcome_rewards=outcome
    )["outcome_disagreement_group_fraction"]
    spread = [np.ptp(rewards[g * N : (g + 1) * N]) > 1e-6 for g in range(2)]
    assert expected == pytest.approx(sum(spread) / PROMPTS)
    logged = _by_slot(out, "advbudget/outcome_disagreement_group_fraction")
    assert logged == pytest.approx(np.full(PROMPTS * N, expected))


def test_a_micro_step_with_no_action_token_has_metric_means_of_zero() -> None:
    """A step of stale samples only, dropped, leaves every rank's micro-batch without an
    action token: the reduced count OpenRLHF divides its metric sums by is then tiny
    instead of 0; any other reduction passes unchanged."""
    guard = _hooks._WRAPPERS["all_reduce"](lambda self, data, op="mean": data)
    empty = guard(None, {"_num_action_tokens": 0.0, "_num_samples": 4.0, "policy_loss": 0.0})
    assert empty["policy_loss"] / empty["_num_action_tokens"] == 0.0
    assert empty["_num_samples"] == 4.0
    assert 100.0 + empty["_num_action_tokens"] == 100.0  # a sum of real counts: unmoved
    some = {"_num_action_tokens": 3.0, "policy_loss": 1.5}
    assert guard(None, dict(some)) == some
    assert guard(None, 0.0) == 0.0  # a scalar: untouched


def test_under_ray_trainer_and_generator_share_one_version(local_ray: None) -> None:
    """Another process of the job (the async generator is another actor) reads what this
    one published, and the counter outlives each call (Ray ends an actor whose last
    handle goes out of scope)."""
    import ray

    @ray.remote(num_cpus=0)
    def read() -> int:
        from advbudget.adapters.openrlhf import _policy_versions

        return _policy_versions.published()

    @ray.remote(num_cpus=0)
    def send(version: int) -> None:
        from advbudget.adapters.openrlhf import _policy_versions

        _policy_versions.publish(version)

    _policy_versions.publish(3)
    assert _policy_versions.published() == 3
    assert ray.get(read.remote()) == 3
    ray.get(send.remote(4))
    assert _policy_versions.published() == 4
