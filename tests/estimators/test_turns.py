"""GiGPO (``"gigpo"``), the catalogue's estimator of turns: an episode part (the trajectory's
reward against its prompt group's rows) plus ``omega`` times a step part (each row's
discounted return against the rows of its group that act from the same anchor state).
Hand values (the rules' worked example, both modes), the float64 reference (a row-by-row
loop written from verl-agent's code) on every backend and on random batches, invariants
(hypothesis: row order; one row per trajectory and distinct anchors is GRPO / Dr. GRPO),
singletons, unscored trajectories, the metrics, and one error per bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages
from advbudget.metrics import advantage_metrics
from advbudget.testing import assert_close, to_numpy

from ..references import reference

NAN = math.nan
# The worked example: T1 acts from s0, s1, s2 with turn rewards 0, 0, 1 and reward 1; T2
# from s0, s3 with turn rewards 0, 0 and reward 0; one prompt; gamma 0.9.
EXAMPLE: dict[str, Any] = {
    "group_ids": ["q"] * 5,
    "trajectory_ids": ["T1", "T1", "T1", "T2", "T2"],
    "anchor_ids": ["s0", "s1", "s2", "s0", "s3"],
    "turn_rewards": [0.0, 0.0, 1.0, 0.0, 0.0],
    "gamma": 0.9,
}
EXAMPLE_REWARDS = [NAN, NAN, 1.0, NAN, 0.0]


def example(**overrides: Any) -> Any:
    call = {**EXAMPLE, **overrides}
    rewards = np.array(call.pop("rewards", EXAMPLE_REWARDS))
    return compute_advantages(rewards, "gigpo", **call)


def test_the_worked_example_mean_norm() -> None:
    # Returns .81, .9, 1 | 0, 0; episode: rows' mean .6 -> .4, .4, .4, -.6, -.6; the step
    # group s0 holds .81 and 0 (mean .405); s1, s2, s3 are alone (0).
    result = example()
    np.testing.assert_allclose(result.advantages, [0.805, 0.4, 0.4, -1.005, -0.6], atol=1e-12)
    assert result.valid.tolist() == [True] * 5
    np.testing.assert_allclose(result.row_weights, [1 / 3] * 3 + [1 / 2] * 2)


def test_the_worked_example_mean_std_norm() -> None:
    # Episode: rows 1, 1, 1, 0, 0, unbiased std sqrt(.3); step s0: .81, 0, std .405·sqrt(2).
    eps = 1e-6
    episode = np.array([0.4, 0.4, 0.4, -0.6, -0.6]) / (math.sqrt(0.3) + eps)
    step = np.array([0.405, 0, 0, -0.405, 0]) / (0.405 * math.sqrt(2) + eps)
    result = example(mode="mean_std_norm")
    np.testing.assert_allclose(result.advantages, episode + step, rtol=1e-12)
    half = example(mode="mean_std_norm", omega=0.5)
    np.testing.assert_allclose(half.advantages, episode + 0.5 * step, rtol=1e-12)


def test_the_trajectory_level_result_is_each_trajectorys_mean_row_advantage() -> None:
    result = example()
    traj = result.trajectories.result
    np.testing.assert_allclose(traj.advantages, [(0.805 + 0.4 + 0.4) / 3, (-1.005 - 0.6) / 2])
    # A loss with row_weights gives each trajectory that mean once.
    np.testing.assert_allclose(
        np.sum(result.advantages * result.row_weights), np.sum(traj.advantages), atol=1e-12
    )
    assert advantage_metrics(result) == advantage_metrics(traj)
    assert advantage_metrics(result)["positive_advantage_fraction"] == 0.5  # of 2 trajectories


def random_batch(rng: np.random.Generator) -> dict[str, Any]:
    """Prompts of 1 to 4 trajectories of 1 to 4 rows, anchors from a small set (so step
    groups form), the reward on one row or repeated, rows shuffled."""
    rewards, prompts, trajs, anchors, turns = [], [], [], [], []
    t = 0
    for p in range(int(rng.integers(1, 5))):
        for _ in range(int(rng.integers(1, 5))):
            rows = int(rng.integers(1, 5))
            reward = float(rng.choice([0.0, 0.5, 1.0]))
            for k in range(rows):
                last = k == rows - 1
                rewards.append(reward if last or rng.random() < 0.3 else NAN)
                prompts.append(f"p{p}")
                trajs.append(t)
                anchors.append(int(rng.integers(0, 3)) if k < 2 else 10 + k)
                turns.append(float(rng.choice([0.0, 0.0, 1.0, -0.5])))
            t += 1
    order = rng.permutation(len(rewards))
    return {
        "rewards": np.array(rewards)[order],
        "group_ids": [prompts[i] for i in order],
        "trajectory_ids": [trajs[i] for i in order],
        "anchor_ids": np.array(anchors)[order],
        "turn_rewards": np.array(turns)[order],
    }


def reference_of(batch: dict[str, Any], **options: Any) -> np.ndarray:
    return reference(
        "gigpo",
        batch["rewards"],
        batch["group_ids"],
        trajectory_ids=batch["trajectory_ids"],
        anchor_ids=batch["anchor_ids"],
        turn_rewards=batch["turn_rewards"],
        **options,
    )


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    "options",
    [{}, {"mode": "mean_std_norm"}, {"gamma": 0.8, "omega": 0.3}, {"singletons": "raw"}],
    ids=["mean_norm", "mean_std_norm", "gamma-omega", "raw"],
)
def test_random_batches_match_the_float64_reference(seed: int, options: dict[str, Any]) -> None:
    batch = random_batch(np.random.default_rng(seed))
    rewards = batch.pop("rewards")
    got = compute_advantages(rewards, "gigpo", **batch, **options)
    want = reference_of({**batch, "rewards": rewards}, **options)
    np.testing.assert_allclose(got.advantages, want, rtol=1e-10, atol=1e-10)


def test_every_backend_matches_the_float64_reference(xp: Any) -> None:
    batch = random_batch(np.random.default_rng(42))
    want = reference_of(batch, mode="mean_std_norm", gamma=0.9)
    for dtype, tol in ((xp.float64, 1e-10), (xp.float32, 1e-4)):
        got = compute_advantages(
            xp.asarray(batch["rewards"], dtype=dtype),
            "gigpo",
            group_ids=batch["group_ids"],
            trajectory_ids=batch["trajectory_ids"],
            anchor_ids=batch["anchor_ids"],
            turn_rewards=xp.asarray(batch["turn_rewards"], dtype=dtype),
            mode="mean_std_norm",
            gamma=0.9,
        )
        assert_close(got.advantages, want, xp=xp, dtype=dtype, rtol=tol, atol=tol)
        assert_close(got.row_weights, to_numpy(got.row_weights), xp=xp, dtype=dtype)


ONE_ROW = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.25, 1.0, 2.0])), min_size=1, max_size=10
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rollouts=ONE_ROW, normed=st.booleans())
def test_one_row_per_trajectory_and_distinct_anchors_is_dr_or_grpo(
    rollouts: list[tuple[int, float]], normed: bool
) -> None:
    """With no step group of two rows, only the episode part is left: over one row per
    trajectory it is Dr. GRPO (mean_norm) or GRPO with the unbiased std (mean_std_norm)."""
    prompts = [p for p, _ in rollouts]
    rewards = np.array([r for _, r in rollouts])
    n = len(rewards)
    got = compute_advantages(
        rewards,
        "gigpo",
        group_ids=prompts,
        trajectory_ids=list(range(n)),
        anchor_ids=list(range(n)),
        turn_rewards=np.ones(n),
        mode="mean_std_norm" if normed else "mean_norm",
    )
    want = compute_advantages(rewards, "grpo" if normed else "dr", group_ids=prompts)
    np.testing.assert_allclose(got.advantages, want.advantages, atol=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16))
def test_row_order_changes_no_advantage(seed: int) -> None:
    rng = np.random.default_rng(seed)
    batch = random_batch(rng)
    rewards = batch.pop("rewards")
    base = compute_advantages(rewards, "gigpo", **batch, gamma=0.7)
    # Each trajectory's rows keep their order (its returns depend on it); the rows of
    # different trajectories interleave differently.
    trajs = np.array(batch["trajectory_ids"])
    order = np.argsort(rng.permutation(trajs.max() + 1)[trajs], kind="stable")
    moved = {k: (np.asarray(v)[order]).tolist() for k, v in batch.items()}
    shuffled = compute_advantages(rewards[order], "gigpo", **moved, gamma=0.7)
    np.testing.assert_allclose(shuffled.advantages, base.advantages[order], atol=1e-12)


def test_a_prompt_group_of_one_row_follows_singletons() -> None:
    call = {"group_ids": ["a", "b", "b"], "trajectory_ids": [0, 1, 2], "anchor_ids": [0, 0, 0],
            "turn_rewards": [0.0, 0.0, 0.0]}  # fmt: skip
    rewards = np.array([0.7, 1.0, 0.0])
    skip = compute_advantages(rewards, "gigpo", **call)
    np.testing.assert_allclose(skip.advantages, [0.0, 0.5, -0.5])
    raw = compute_advantages(rewards, "gigpo", singletons="raw", **call)
    np.testing.assert_allclose(raw.advantages, [0.7, 0.5, -0.5])
    normed = compute_advantages(rewards, "gigpo", singletons="raw", mode="mean_std_norm", **call)
    np.testing.assert_allclose(normed.advantages[0], 0.7 / (1 + 1e-6), rtol=1e-12)
    # One trajectory of several rows is not alone: its rows' mean is its reward (0).
    several = compute_advantages(np.array([NAN, 0.7]), "gigpo", group_ids=["a", "a"],
                                 trajectory_ids=[0, 0], anchor_ids=[0, 1],
                                 turn_rewards=[0.0, 1.0], singletons="raw")  # fmt: skip
    np.testing.assert_allclose(several.advantages, [0.0, 0.0])
    assert several.valid.tolist() == [True, True]


def test_a_tied_group_keeps_its_step_signal() -> None:
    # Both trajectories solve it (episode part 0), but from s0 one got there faster.
    result = compute_advantages(
        np.array([NAN, 1.0, 1.0]),
        "gigpo",
        group_ids=["q"] * 3,
        trajectory_ids=["slow", "slow", "fast"],
        anchor_ids=["s0", "s1", "s0"],
        turn_rewards=[0.0, 1.0, 1.0],
        gamma=0.5,
    )
    np.testing.assert_allclose(result.advantages, [-0.25, 0.0, 0.25])
    assert result.valid.tolist() == [True] * 3
    assert result.num_skipped == 0


def test_a_trajectory_without_a_reward_is_left_out_under_omit() -> None:
    rewards = [NAN, NAN, 1.0, NAN, 0.0, NAN, NAN]
    call = {
        "group_ids": ["q"] * 7,
        "trajectory_ids": ["T1", "T1", "T1", "T2", "T2", "T3", "T3"],
        "anchor_ids": ["s0", "s1", "s2", "s0", "s3", "s0", "s1"],
        "turn_rewards": [0.0, 0.0, 1.0, 0.0, 0.0, NAN, 5.0],  # T3's do not count
        "gamma": 0.9,
    }
    with pytest.raises(ValueError, match=r"^rewards: trajectory 'T3' has no reward"):
        compute_advantages(np.array(rewards), "gigpo", **call)
    result = compute_advantages(np.array(rewards), "gigpo", nan_policy="omit", **call)
    np.testing.assert_allclose(result.advantages, [0.805, 0.4, 0.4, -1.005, -0.6, 0, 0], atol=1e-12)
    assert result.valid.tolist() == [True] * 5 + [False] * 2


def test_torch_keeps_its_namespace_and_dtype() -> None:
    torch = pytest.importorskip("torch")
    result = compute_advantages(torch.tensor([NAN, NAN, 1.0, NAN, 0.0]), "gigpo", **EXAMPLE)
    assert isinstance(result.advantages, torch.Tensor)
    assert result.advantages.dtype == torch.float32
    torch.testing.assert_close(
        result.advantages, torch.tensor([0.805, 0.4, 0.4, -1.005, -0.6]), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"trajectory_ids": None}, ValueError, r"^trajectory_ids: estimator 'gigpo' scores"),
        ({"anchor_ids": None}, ValueError, r"^anchor_ids: estimator 'gigpo' needs one value"),
        ({"turn_rewards": None}, ValueError, r"^turn_rewards: estimator 'gigpo' needs one"),
        ({"anchor_ids": ["s0"] * 4}, ValueError, r"^anchor_ids: expected one label per row \(5\)"),
        ({"turn_rewards": [0.0] * 4}, ValueError, r"^turn_rewards: expected one reward per row"),
        ({"turn_rewards": [0, NAN, 1.0, 0, 0]}, ValueError, r"^turn_rewards: expected finite"),
        ({"mode": "mean"}, ValueError, r"^mode: expected one of \('mean_norm', 'mean_std_norm'\)"),
        ({"gamma": 1.5}, ValueError, r"^gamma: expected a number in \[0, 1\], got 1.5"),
        ({"omega": -1.0}, ValueError, r"^omega: "),
        ({"group_weight": "dqw"}, ValueError, r"^group_weight: not with estimator 'gigpo'"),
        ({"singletons": "refuse"}, ValueError, r"^singletons: expected one of \('skip', 'raw'\)"),
        ({"budget": 2.0}, TypeError, r"^budget: not an option of estimator 'gigpo'"),
        ({"group_size": 5}, ValueError, r"^group_size: a multi-turn call"),
    ],
)
def test_one_clear_error_per_bad_input(
    overrides: dict[str, Any], error: type[Exception], message: str
) -> None:
    call = {**EXAMPLE, **overrides}
    call = {k: v for k, v in call.items() if v is not None}
    with pytest.raises(error, match=message):
        compute_advantages(np.array(EXAMPLE_REWARDS), "gigpo", **call)


def test_a_traced_call_is_refused() -> None:
    jax = pytest.importorskip("jax")

    @jax.jit
    def traced(r: Any) -> Any:
        return compute_advantages(r, "gigpo", **EXAMPLE).advantages

    with pytest.raises(ValueError, match=r"^trajectory_ids: a multi-turn call reads"):
        traced(jax.numpy.asarray(EXAMPLE_REWARDS))
