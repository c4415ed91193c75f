"""Multi-turn rows, ``compute_advantages(..., group_ids=prompts, trajectory_ids=trajs)``:
each trajectory is one rollout however many rows it has. Hand values, a float64 reference
(a Python collapse of the rows, then the estimator's reference) on every backend, the
invariants (hypothesis: row order, repeated rows), the metrics, and one error per bad
input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advbudget import EstimatorState, compute_advantages
from advbudget.metrics import advantage_metrics, kappa_pairs
from advbudget.testing import assert_close, to_numpy

from .references import reference

NAN = math.nan
# The hand case: trajectories of 1, 2, 3 and 1 rows with rewards 1, 0, 0, 1 (the
# reward on one row of each, NaN on the others, or repeated).
TRAJS = ["t1", "t2", "t2", "t3", "t3", "t3", "t4"]
REWARDS = [1.0, NAN, 0.0, NAN, NAN, 0.0, 1.0]
PROMPTS = ["p"] * 7


def collapsed(
    rewards: list[float], trajs: list[Any], prompts: list[Any]
) -> tuple[list[float], list[Any], list[int]]:
    """float64 reference of the rows' rule, a plain loop: one reward and prompt per
    trajectory (in order of first row), and each row's trajectory."""
    order: dict[Any, int] = {}
    reward: list[float] = []
    prompt: list[Any] = []
    of_row = []
    for r, t, p in zip(rewards, trajs, prompts, strict=True):
        if t not in order:
            order[t] = len(order)
            reward.append(NAN)
            prompt.append(p)
        k = order[t]
        if not math.isnan(r):
            reward[k] = r
        of_row.append(k)
    return reward, prompt, of_row


@pytest.mark.parametrize("estimator", ["budget", "grpo", "rloo", "maxrl", "dr"])
def test_the_hand_case_on_every_row(estimator: str) -> None:
    result = compute_advantages(
        np.array(REWARDS), estimator, group_ids=PROMPTS, trajectory_ids=TRAJS
    )
    alone = compute_advantages(np.array([1.0, 0, 0, 1]), estimator, group_size=4).advantages
    np.testing.assert_allclose(result.advantages, alone[[0, 1, 1, 2, 2, 2, 3]], rtol=1e-12)
    np.testing.assert_allclose(result.row_weights, [1, 1 / 2, 1 / 2, 1 / 3, 1 / 3, 1 / 3, 1])
    assert result.valid.tolist() == [True] * 7
    assert result.num_groups == 1
    assert result.trajectories is not None
    assert result.trajectories.index.tolist() == [0, 1, 1, 2, 2, 2, 3]


def test_budget_shares_the_prompts_budget_among_its_trajectories_whatever_their_length() -> None:
    """The prompt's budget is spread over its trajectories, not its rows: a trajectory of
    3 rows gets the advantage a trajectory of 1 row gets."""
    rows = compute_advantages(np.array([1.0, 0, 0, 0, 0, 0]), "budget",
                              group_ids=["p"] * 6, trajectory_ids=[0, 1, 1, 1, 2, 3])  # fmt: skip
    per_trajectory = compute_advantages(np.array([1.0, 0, 0, 0]), "budget", group_size=4)
    np.testing.assert_allclose(rows.advantages, per_trajectory.advantages[[0, 1, 1, 1, 2, 3]])


def test_the_reward_may_be_repeated_or_on_any_one_row() -> None:
    repeated = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    last_only = [1.0, NAN, 0.0, NAN, NAN, 0.0, 1.0]
    first_only = [1.0, 0.0, NAN, 0.0, NAN, NAN, 1.0]
    results = [
        compute_advantages(np.array(r), "grpo", group_ids=PROMPTS, trajectory_ids=TRAJS)
        for r in (repeated, last_only, first_only)
    ]
    for other in results[1:]:
        np.testing.assert_array_equal(other.advantages, results[0].advantages)


def test_two_prompts_rows_in_any_order_and_the_metrics_count_trajectories_once() -> None:
    rng = np.random.default_rng(3)
    trajs, prompts, rewards = [], [], []
    for t in range(12):
        turns = int(rng.integers(1, 5))
        reward = float(rng.integers(0, 2))
        for turn in range(turns):
            trajs.append(f"traj{t}")
            prompts.append(t % 3)
            rewards.append(reward if turn == turns - 1 else NAN)
    order = rng.permutation(len(trajs))
    trajs = [trajs[i] for i in order]
    prompts = [prompts[i] for i in order]
    rewards = [rewards[i] for i in order]
    result = compute_advantages(
        np.array(rewards), "budget", group_ids=prompts, trajectory_ids=trajs
    )
    reward, prompt, of_row = collapsed(rewards, trajs, prompts)
    want = reference("budget", reward, prompt)
    np.testing.assert_allclose(result.advantages, want[of_row], rtol=1e-12, atol=1e-12)
    single = compute_advantages(np.array(reward), "budget", group_ids=prompt)
    assert advantage_metrics(result) == advantage_metrics(single)
    counts = np.bincount(of_row)
    np.testing.assert_allclose(result.row_weights, 1 / counts[of_row])
    # A loss weighted by row_weights sums each trajectory's advantage once.
    np.testing.assert_allclose(
        np.sum(result.advantages * result.row_weights), np.sum(single.advantages), atol=1e-12
    )


def test_every_backend_matches_the_float64_reference(xp: Any) -> None:
    rewards = [0.0, NAN, 1.0, 0.5, NAN, NAN, 0.0, 1.0, NAN]
    trajs = [7, 7, 8, 9, 9, 9, 3, 4, 4]
    prompts = ["a", "a", "a", "b", "b", "b", "a", "b", "b"]
    got = compute_advantages(
        xp.asarray(rewards, dtype=xp.float64), "rloo", group_ids=prompts, trajectory_ids=trajs
    )
    reward, prompt, of_row = collapsed(rewards, trajs, prompts)
    assert_close(got.advantages, reference("rloo", reward, prompt)[of_row], xp=xp)
    assert_close(got.row_weights, 1 / np.bincount(of_row)[of_row], xp=xp)
    assert to_numpy(got.valid).tolist() == [True] * 9


def test_torch_keeps_its_namespace_and_dtype() -> None:
    torch = pytest.importorskip("torch")
    trajs = torch.tensor([0, 1, 1, 2, 2, 2, 3])
    rewards = torch.tensor(REWARDS, dtype=torch.float32)
    got = compute_advantages(rewards, "grpo", group_ids=PROMPTS, trajectory_ids=trajs)
    assert isinstance(got.advantages, torch.Tensor)
    assert got.advantages.dtype == torch.float32
    assert got.row_weights.dtype == torch.float32


def test_a_trajectory_without_a_reward() -> None:
    rewards = [1.0, NAN, NAN, NAN, NAN, 0.0, 1.0]
    with pytest.raises(
        ValueError, match=r"^rewards: trajectory 't2' has no reward on any of its 2"
    ):
        compute_advantages(np.array(rewards), "grpo", group_ids=PROMPTS, trajectory_ids=TRAJS)
    result = compute_advantages(np.array(rewards), "grpo", group_ids=PROMPTS,
                                trajectory_ids=TRAJS, nan_policy="omit")  # fmt: skip
    assert result.valid.tolist() == [True, False, False, True, True, True, True]
    assert result.advantages[1] == result.advantages[2] == 0.0
    want = compute_advantages(np.array([1.0, NAN, 0.0, 1.0]), "grpo", group_size=4,
                              nan_policy="omit").advantages  # fmt: skip
    np.testing.assert_allclose(result.advantages, want[[0, 1, 1, 2, 2, 2, 3]])
    assert advantage_metrics(result)["nan_reward_fraction"] == 0.25


def test_weights_state_inputs_and_components_apply_per_trajectory() -> None:
    rewards = np.array([1.0, NAN, 0.0, NAN, 1.0, 1.0, 0.0])
    trajs = [0, 1, 1, 2, 2, 3, 4]
    prompts = ["a", "a", "a", "a", "a", "b", "b"]
    weighted = compute_advantages(rewards, "grpo", group_ids=prompts, trajectory_ids=trajs,
                                  group_weight="grpo_lead")  # fmt: skip
    alone = compute_advantages(np.array([1.0, 0, 1, 1, 0]), "grpo",
                               group_ids=list("aaabb"), group_weight="grpo_lead")  # fmt: skip
    of_row = [0, 1, 1, 2, 2, 3, 4]
    np.testing.assert_allclose(weighted.advantages, alone.advantages[of_row])
    np.testing.assert_allclose(weighted.weights, alone.weights[of_row])

    state, twin = EstimatorState(), EstimatorState()
    for _ in range(2):
        rows = compute_advantages(rewards, "rae", group_ids=prompts, trajectory_ids=trajs,
                                  prompt_ids=prompts, state=state)  # fmt: skip
        once = compute_advantages(np.array([1.0, 0, 1, 1, 0]), "rae", group_size=1,
                                  prompt_ids=["a", "a", "a", "b", "b"], state=twin)  # fmt: skip
        np.testing.assert_allclose(rows.advantages, once.advantages[of_row])
    assert state.state_dict() == twin.state_dict()

    lengths = np.array([3.0, 2, 5, 1, 1, 4, 6])
    rows = compute_advantages(rewards, "reinforce_plus_plus_baseline", group_ids=prompts,
                              trajectory_ids=trajs, response_lengths=lengths)  # fmt: skip
    once = compute_advantages(np.array([1.0, 0, 1, 1, 0]), "reinforce_plus_plus_baseline",
                              group_ids=["a", "a", "a", "b", "b"],
                              response_lengths=np.array([3.0, 7, 2, 4, 6]))  # fmt: skip
    np.testing.assert_allclose(rows.advantages, once.advantages[of_row])

    parts = np.array([[1.0, 0.5], [NAN, NAN], [0.0, 1.0], [NAN, 0.0], [1.0, NAN], [1, 1], [0, 0]])
    rows = compute_advantages(parts, "gdpo", group_ids=prompts, trajectory_ids=trajs)
    once = compute_advantages(np.array([[1.0, 0.5], [0, 1], [1, 0], [1, 1], [0, 0]]), "gdpo",
                              group_ids=["a", "a", "a", "b", "b"])  # fmt: skip
    np.testing.assert_allclose(rows.advantages, once.advantages[of_row])


def test_kappa_pairs_are_those_of_the_trajectories() -> None:
    result = compute_advantages(np.array(REWARDS), "grpo", group_ids=PROMPTS, trajectory_ids=TRAJS)
    with pytest.raises(ValueError, match=r"^result: a multi-turn result"):
        kappa_pairs(result)
    assert result.trajectories is not None
    assert kappa_pairs(result.trajectories.result).rows().tolist() == [0, 1]


ROWS = st.lists(
    st.tuples(st.integers(0, 5), st.integers(1, 3), st.sampled_from([0.0, 0.5, 1.0])),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trajectories=ROWS, seed=st.integers(0, 2**16), estimator=st.sampled_from(
    ["budget", "grpo", "rloo"]))  # fmt: skip
def test_row_order_and_repeated_rows_change_no_advantage(
    trajectories: list[tuple[int, int, float]], seed: int, estimator: str
) -> None:
    """Each trajectory (prompt, rows, reward) as rows with the reward on its last row;
    shuffling the rows permutes the advantages, and a trajectory's extra rows (NaN or a
    repeat of its reward) change no advantage."""
    trajs, prompts, rewards = [], [], []
    for t, (prompt, turns, reward) in enumerate(trajectories):
        for turn in range(turns):
            trajs.append(t)
            prompts.append(prompt)
            rewards.append(reward if turn == turns - 1 else NAN)
    base = compute_advantages(np.array(rewards), estimator, group_ids=prompts, trajectory_ids=trajs)
    order = np.random.default_rng(seed).permutation(len(trajs))
    shuffled = compute_advantages(np.array(rewards)[order], estimator,
                                  group_ids=[prompts[i] for i in order],
                                  trajectory_ids=[trajs[i] for i in order])  # fmt: skip
    np.testing.assert_allclose(shuffled.advantages, base.advantages[order], atol=1e-12)
    extra = len(trajs) - 1  # the last trajectory gets two more rows
    more = compute_advantages(np.array([*rewards, NAN, rewards[extra]]), estimator,
                              group_ids=[*prompts, prompts[extra], prompts[extra]],
                              trajectory_ids=[*trajs, trajs[extra], trajs[extra]])  # fmt: skip
    np.testing.assert_allclose(more.advantages[: len(trajs)], base.advantages, atol=1e-12)


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"trajectory_ids": [0, 1]}, r"^trajectory_ids: expected one label per row \(7\)"),
        ({"group_ids": ["p"] * 6}, r"^group_ids: expected one label per row \(7\)"),
        ({"group_ids": None}, r"^group_ids: a multi-turn call \(trajectory_ids\) groups"),
        (
            {"group_ids": ["p", "p", "q", "p", "p", "p", "p"]},
            r"^trajectory_ids: the rows of trajectory 't2' carry different prompt labels",
        ),
        ({"group_size": 7}, r"^group_size: a multi-turn call"),
        (
            {"rewards": [1.0, 0.0, 1.0, NAN, NAN, 0.0, 1.0]},
            r"^rewards: trajectory 't2' has two different rewards on its rows \(0.0 and 1.0\)",
        ),
        (
            {"prompt_ids": [1, 2, 3, 4, 4, 4, 5], "estimator": "rae"},
            r"^prompt_ids: the rows of trajectory 't2' carry different identities",
        ),
    ],
)
def test_one_clear_error_per_bad_input(keywords: dict[str, Any], message: str) -> None:
    call: dict[str, Any] = {"group_ids": PROMPTS, "trajectory_ids": TRAJS, **keywords}
    rewards = np.array(call.pop("rewards", REWARDS))
    estimator = call.pop("estimator", "grpo")
    if estimator == "rae":
        call["state"] = EstimatorState()
    with pytest.raises(ValueError, match=message):
        compute_advantages(rewards, estimator, **call)


def test_groups_with_trajectory_ids_and_a_traced_call_are_refused() -> None:
    from advbudget import make_groups

    groups = make_groups(np.zeros(7), group_size=7)
    with pytest.raises(ValueError, match=r"^groups: a multi-turn call"):
        compute_advantages(np.array(REWARDS), "grpo", groups=groups, trajectory_ids=TRAJS)
    jax = pytest.importorskip("jax")

    @jax.jit
    def traced(r: Any) -> Any:
        return compute_advantages(r, "grpo", group_ids=PROMPTS, trajectory_ids=TRAJS).advantages

    with pytest.raises(ValueError, match=r"^trajectory_ids: a multi-turn call reads"):
        traced(jax.numpy.asarray(REWARDS))


def test_a_result_without_trajectories_has_row_weights_of_one() -> None:
    result = compute_advantages(np.array([1.0, 0.0]), "grpo", group_size=2)
    assert result.trajectories is None
    assert result.row_weights.tolist() == [1.0, 1.0]


def returns_reference(rewards: list[float], trajs: list[Any], gamma: float) -> np.ndarray:
    """float64, a plain loop: each trajectory's rows in row order, R_t = r_t + γ R_{t+1}."""
    rows: dict[Any, list[int]] = {}
    for i, t in enumerate(trajs):
        rows.setdefault(t, []).append(i)
    out = np.zeros(len(rewards))
    for idx in rows.values():
        running = 0.0
        for i in reversed(idx):
            running = rewards[i] + gamma * running
            out[i] = running
    return out


def test_turn_returns_by_hand() -> None:
    """The rules' example: γ = 0.9, T1 turn rewards 0, 0, 1 and T2 0, 0 give .81, .9, 1 | 0, 0."""
    from advbudget import turn_returns

    got = turn_returns(np.array([0.0, 0, 1, 0, 0]), ["T1", "T1", "T1", "T2", "T2"], gamma=0.9)
    np.testing.assert_allclose(got, [0.81, 0.9, 1.0, 0.0, 0.0], rtol=1e-15)
    # Rows of a trajectory need not be adjacent; γ = 1 is the plain reward-to-go.
    got = turn_returns(np.array([1.0, 2, 3, 4, 5]), [1, 0, 1, 0, 1])
    np.testing.assert_array_equal(got, [9.0, 6, 8, 4, 5])


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 6), st.floats(-3, 3)), min_size=1, max_size=40),
    gamma=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
)
def test_turn_returns_match_the_float64_loop(rows: list[tuple[int, float]], gamma: float) -> None:
    from advbudget import turn_returns

    trajs = [t for t, _ in rows]
    rewards = [r for _, r in rows]
    got = turn_returns(np.array(rewards), trajs, gamma=gamma)
    np.testing.assert_allclose(
        got, returns_reference(rewards, trajs, gamma), rtol=1e-12, atol=1e-12
    )


def test_turn_returns_on_every_backend(xp: Any) -> None:
    from advbudget import turn_returns

    rewards = [0.5, 1.0, -1.0, 0.0, 2.0, 0.25]
    trajs = ["b", "a", "b", "a", "b", "c"]
    got = turn_returns(xp.asarray(rewards, dtype=xp.float64), trajs, gamma=0.8)
    assert_close(got, returns_reference(rewards, trajs, 0.8), xp=xp)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"gamma": 1.5}, r"^gamma: expected a number in \[0, 1\], got 1.5"),
        ({"turn_rewards": [0.0, math.inf, 1.0]}, r"^turn_rewards: expected finite numbers"),
        ({"trajectory_ids": [0, 0]}, r"^trajectory_ids: expected one label per row \(3\)"),
        ({"turn_rewards": np.zeros((3, 1))}, r"^turn_rewards: expected a non-empty 1-D array"),
    ],
)
def test_turn_returns_refuse_bad_input(call: dict[str, Any], message: str) -> None:
    from advbudget import turn_returns

    given: dict[str, Any] = {"turn_rewards": [0.0, 1.0, 1.0], "trajectory_ids": [0, 0, 1], **call}
    with pytest.raises(ValueError, match=message):
        turn_returns(np.asarray(given.pop("turn_rewards")), **given)
