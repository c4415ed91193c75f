"""κ_eff after the update: the patched ``BasePPOTrainer.ppo_train`` on a real policy.

The policy is OpenRLHF's own ``Actor`` around a tiny random Qwen3; the actor group is a
stand-in for OpenRLHF's ``RayActorGroup`` (its ``fit`` is one real policy-gradient step on
that model, its ``forward`` is ``PolicyModelActor.forward``'s call, results through Ray's
object store as in training). ``BasePPOTrainer.ppo_train``, ``RemoteExperienceMaker``'s
dispatch helpers and the ``Experience`` objects are OpenRLHF's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("ray")

import ray
import torch

import advbudget.adapters.openrlhf as adapter
from advbudget import compute_advantages
from advbudget.adapters.openrlhf.testing import make_args, make_maker
from advbudget.testing import rounding_tolerance

from .conftest import OPENRLHF_WARNINGS, import_openrlhf

pytestmark = OPENRLHF_WARNINGS

PROMPT = 3  # prompt tokens per sample
N = 4  # samples per prompt


@pytest.fixture(scope="module")
def local_ray():  # type: ignore[no-untyped-def]
    if ray.is_initialized():
        pytest.skip("Ray already initialised in this process")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def tiny_actor(seed: int = 0) -> Any:
    import_openrlhf()
    from openrlhf.models import Actor
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    actor = Actor(Qwen3ForCausalLM(config))
    actor.packing_samples = False  # Actor sets it only when it loads a model from a path
    return actor


def log_probs(actor: Any, sequences: Any, action_mask: Any, attention_mask: Any) -> Any:
    """What ``PolicyModelActor.forward`` does on one micro-batch (CPU here)."""
    actor.eval()
    with torch.no_grad():
        out = actor(sequences, action_mask, attention_mask)
    actor.train()
    return out


def experiences_with_sequences(actor: Any, prompts: int, seed: int = 0) -> list[Any]:
    """Real Experiences with token sequences (prompt + right-padded response), the actor's
    log-probs before the update, binary-ish rewards, shuffled into micro-batches of 3."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    g = torch.Generator().manual_seed(seed)
    total = prompts * N
    lengths = torch.randint(1, 7, (total,), generator=g)
    rewards = torch.tensor([0.0, 1.0, 0.5])[torch.randint(3, (total,), generator=g)]
    rewards[:N] = 1.0  # a constant group: no pair, no κ_eff
    order = torch.randperm(total, generator=g)
    experiences = []
    for start in range(0, total, 3):
        rows = order[start : start + 3]
        width = int(lengths[rows].max())
        action_mask = torch.arange(width)[None, :] < lengths[rows][:, None]
        sequences = torch.randint(1, 64, (len(rows), PROMPT + width), generator=g)
        attention_mask = torch.cat(
            [torch.ones(len(rows), PROMPT, dtype=torch.long), action_mask.long()], dim=1
        )
        sequences = sequences * attention_mask
        experiences.append(
            Experience(
                sequences=sequences,
                attention_mask=attention_mask,
                action_mask=action_mask,
                action_log_probs=log_probs(actor, sequences, action_mask, attention_mask),
                rewards=rewards[rows].clone(),
                kl=torch.zeros(len(rows), width),
                response_length=lengths[rows].float(),
                truncated=torch.zeros(len(rows), dtype=torch.bool),
                index=rows.tolist(),
                info={"reward": rewards[rows].clone()},
            )
        )
    return experiences


class ActorGroup:
    """Stand-in for OpenRLHF's ``RayActorGroup`` with one rank holding ``actor``."""

    def __init__(self, actor: Any, experiences: list[Any]) -> None:
        self.actor = actor
        self.experiences = experiences  # what "append" would have sent
        self.forward_rows = 0

    def async_run_method(self, method_name: str, **kwargs: Any) -> list[Any]:
        if method_name == "fit":  # one policy-gradient step: raise log-prob x advantage
            optimizer = torch.optim.SGD(self.actor.parameters(), lr=0.5)
            loss = torch.zeros(())
            for e in self.experiences:
                logp = self.actor(e.sequences, e.action_mask, e.attention_mask)
                loss = loss - (e.advantages * logp * e.action_mask).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return [ray.put({"policy_loss": float(loss)})]
        return [ray.put(None)]

    def async_run_method_batch(self, method_name: str, **kwargs: Any) -> list[Any]:
        assert method_name == "forward"
        batches = zip(
            kwargs["sequences"], kwargs["action_mask"], kwargs["attention_mask"], strict=True
        )
        results = []
        for sequences, action_mask, attention_mask in batches:
            self.forward_rows += len(sequences)
            results.append(log_probs(self.actor, sequences, action_mask, attention_mask))
        return [ray.put(results)]


def make_trainer(
    estimator: str, kappa_every: int, prompts: int = 6, trainer_class: Any = None
) -> Any:
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    actor = tiny_actor()
    args = make_args(estimator, N)
    args.advbudget = SimpleNamespace(budget=1.0, kappa_every=kappa_every)
    args.critic = SimpleNamespace(freezing_steps=-1)
    args.ds = SimpleNamespace(enable_sleep=False, ring_attn_size=1, tensor_parallel_size=1)
    args.train = SimpleNamespace(colocate_all=False, colocate_actor_ref=False)
    maker = make_maker(args)
    experiences = experiences_with_sequences(actor, prompts)
    maker.compute_advantages_and_returns(experiences)  # patched: ours, or OpenRLHF's

    trainer = object.__new__(trainer_class or BasePPOTrainer)
    trainer.args = args
    trainer.strategy = maker.strategy
    trainer.experience_maker = maker
    trainer.kl_ctl = maker.kl_ctl
    trainer.critic_model_group = None
    trainer.actor_model_group = ActorGroup(actor, experiences)
    return trainer


def expected_kappa(trainer: Any) -> tuple[Any, float]:
    """κ_eff by hand: every row's log-probs after the step, pairs from the core's advantages
    in prompt-major order (first largest / first smallest), constant groups left out; and
    the tolerance of float32 log-probs scored in other batches than the adapter's: each
    κ_eff sums the token log-probs of 4 sequences."""
    experiences = trainer.actor_model_group.experiences
    total = sum(len(e.index) for e in experiences)
    old, new, rewards = torch.empty(total), torch.empty(total), torch.empty(total)
    tolerance = 0.0
    for e in experiences:
        old[e.index] = (e.action_log_probs * e.action_mask).sum(-1)
        after = log_probs(
            trainer.actor_model_group.actor, e.sequences, e.action_mask, e.attention_mask
        )
        new[e.index] = (after * e.action_mask).sum(-1)
        rewards[e.index] = e.rewards
        terms = 4 * e.action_mask.shape[-1]
        tolerance = max(tolerance, rounding_tolerance(after * e.action_mask, terms=terms))
    advantages = compute_advantages(rewards, "budget", group_size=N).advantages.reshape(-1, N)
    change = (new - old).reshape(-1, N)
    top, bottom = advantages.argmax(-1), advantages.argmin(-1)
    rows = torch.arange(len(advantages))
    values = change[rows, top] - change[rows, bottom]
    return values[advantages.amax(-1) > advantages.amin(-1)], tolerance


@pytest.mark.usefixtures("local_ray")
def test_kappa_eff_after_the_update_matches_a_hand_computation() -> None:
    adapter.install()
    try:
        trainer = make_trainer("reward_budget", kappa_every=1)
        status = trainer.ppo_train(1)  # OpenRLHF's ppo_train, patched
    finally:
        adapter.uninstall()
    assert "policy_loss" in status  # OpenRLHF's own status is kept
    expected, tolerance = expected_kappa(trainer)
    assert len(expected) == 5  # six groups, the first constant
    assert status["advbudget/kappa_eff/count"] == len(expected)
    expected = expected.double()
    for key, value in (("mean", expected.mean()), ("max", expected.max()), ("min", expected.min())):
        got = torch.tensor(status[f"advbudget/kappa_eff/{key}"], dtype=torch.float64)
        torch.testing.assert_close(got, value, rtol=0, atol=tolerance, msg=key)
    assert status["advbudget/kappa_eff/mean"] != 0.0  # the step moved the policy
    # Only the pairs went through the extra forward: 2 rows per group with a gap.
    assert trainer.actor_model_group.forward_rows == 2 * len(expected)
    assert trainer.experience_maker._advbudget_kappa_pairs is None  # the batch is released


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize(
    ("estimator", "kappa_every", "step"),
    # ppo_train(k) is the (k+1)-th update (OpenRLHF logs it as step k+1): with
    # kappa_every 2, updates 1 and 3 are not due.
    [
        ("reward_budget", 2, 0),
        ("reward_budget", 2, 2),
        ("reward_budget", 0, 4),
        ("group_norm", 1, 1),
    ],
)
def test_no_kappa_pass_when_not_due_off_or_not_ours(
    estimator: str, kappa_every: int, step: int
) -> None:
    adapter.install()
    try:
        trainer = make_trainer(estimator, kappa_every=kappa_every)
        status = trainer.ppo_train(step)
    finally:
        adapter.uninstall()
    assert "policy_loss" in status
    assert not any(key.startswith("advbudget/") for key in status)
    assert trainer.actor_model_group.forward_rows == 0
    assert getattr(trainer.experience_maker, "_advbudget_kappa_pairs", None) is None


@pytest.mark.usefixtures("local_ray")
def test_kappa_runs_in_a_ray_actor_class_decorated_before_the_patch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bug the CPU loop found: ``@ray.remote`` copies inherited methods onto the actor
    class (a tracing wrapper of each, ray's ``_inject_tracing_into_class``) when
    ``ppo_trainer.py`` executes, before the patch on import runs: ``PPOTrainer.ppo_train`` is
    then OpenRLHF's original, and the κ_eff pass never ran. The patched
    ``BasePPOTrainer.__init__`` binds our wrapper on the instance."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    from advbudget.adapters.openrlhf._hooks import bind_ppo_train

    adapter.uninstall()

    class Trainer(BasePPOTrainer):  # decorated unpatched, as in the real module
        pass

    actor_class = ray.remote(Trainer).__ray_metadata__.modified_class
    adapter.install()
    try:
        assert "ppo_train" in vars(actor_class)  # Ray's copy shadows the patched base method
        assert hasattr(BasePPOTrainer.__init__, "_advbudget_original")
        unbound = make_trainer("reward_budget", kappa_every=1, trainer_class=actor_class)
        with caplog.at_level("WARNING", logger="advbudget.adapters.openrlhf"):
            assert not any(k.startswith("advbudget/") for k in unbound.ppo_train(0))
            next_batch = experiences_with_sequences(unbound.actor_model_group.actor, 6)
            unbound.experience_maker.compute_advantages_and_returns(next_batch)
        assert "κ_eff is not running" in caplog.text  # never silent
        trainer = make_trainer("reward_budget", kappa_every=1, trainer_class=actor_class)
        bind_ppo_train(trainer)  # what the patched __init__ does
        status = trainer.ppo_train(0)
    finally:
        adapter.uninstall()
    assert status["advbudget/kappa_eff/count"] > 0


@pytest.mark.usefixtures("local_ray")
def test_kappa_runs_once_in_an_actor_class_decorated_after_the_patch() -> None:
    """The async trainer's case: ``TrainingActor`` (ppo_trainer_async.py:167) is decorated
    after ``ppo_trainer.py`` was imported and patched, so Ray's copy wraps our method; the
    binding in ``__init__`` must then leave it alone (one κ_eff pass, not two)."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    from advbudget.adapters.openrlhf._hooks import bind_ppo_train

    adapter.install()
    try:

        class Trainer(BasePPOTrainer):
            pass

        actor_class = ray.remote(Trainer).__ray_metadata__.modified_class
        trainer = make_trainer("reward_budget", kappa_every=1, trainer_class=actor_class)
        bind_ppo_train(trainer)
        assert "ppo_train" not in vars(trainer)  # the class's copy is already ours
        status = trainer.ppo_train(0)
    finally:
        adapter.uninstall()
    count = status["advbudget/kappa_eff/count"]
    assert count > 0
    assert trainer.actor_model_group.forward_rows == 2 * count  # one pass


def test_pairs_are_picked_by_the_core_and_mapped_to_experience_order() -> None:
    """The core picks o+ / o- on the prompt-major rewards; the maker keeps them as positions
    in the concatenated experiences (shuffled into micro-batches of 3 here)."""
    adapter.install()
    try:
        trainer = make_trainer("reward_budget", kappa_every=1)
    finally:
        adapter.uninstall()
    kept = trainer.experience_maker._advbudget_kappa_pairs
    experiences = kept.experiences
    prompt_major = torch.tensor([i for e in experiences for i in e.index])  # per position
    rewards = torch.empty(len(prompt_major))
    rewards[prompt_major] = torch.cat([e.rewards for e in experiences])
    advantages = compute_advantages(rewards, "budget", group_size=N).advantages.reshape(-1, N)
    gap = advantages.amax(-1) > advantages.amin(-1)
    base = torch.arange(len(advantages)) * N
    top = (advantages.argmax(-1) + base)[gap]  # prompt-major, first max
    bottom = (advantages.argmin(-1) + base)[gap]
    assert prompt_major[kept.top].tolist() == top.tolist()
    assert prompt_major[kept.bottom].tolist() == bottom.tolist()
    assert kept.pairs.group.tolist() == torch.nonzero(gap).reshape(-1).tolist()
    assert kept.pairs.rows().tolist() == sorted(set(kept.top.tolist() + kept.bottom.tolist()))
