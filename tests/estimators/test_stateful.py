"""Estimators that remember prompts across steps (spo, rae) and their EstimatorState:
hand-computed values, the rules of scoring and updating, JSON round trips, and one clear
error per bad input. Values on every backend and layout: tests/test_conformance.py."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advbudget import EstimatorState, compute_advantages
from advbudget.core import spo_rho

from ..references import reference


def rae(rewards: Any, prompts: Any, state: EstimatorState, **options: Any) -> list[float]:
    result = compute_advantages(
        np.asarray(rewards, dtype=float), "rae", group_size=1, prompt_ids=prompts, state=state,
        **options,
    )  # fmt: skip
    return result.advantages.tolist()  # type: ignore[no-any-return]


def spo(rewards: Any, prompts: Any, state: EstimatorState, **options: Any) -> Any:
    return compute_advantages(
        np.asarray(rewards, dtype=float), "spo", group_size=1, prompt_ids=prompts, state=state,
        **options,
    )  # fmt: skip


# -- hand values -------------------------------------------------------------------------


def test_rae_the_rules_example() -> None:
    """decay 0.5, ids [x, y, x], r [1, 0, 0]: every row against the baseline at the start
    of the call (0), then one update per prompt with its mean reward."""
    state = EstimatorState()
    assert rae([1, 0, 0], ["x", "y", "x"], state, decay=0.5) == [1.0, 0.0, 0.0]
    assert state.values("x") == {"baseline": 0.25}
    assert state.values("y") == {"baseline": 0.0}
    # next call: scored against b_x = 0.25
    assert rae([1, 1], ["x", "x"], state, decay=0.5) == [0.75, 0.75]
    assert state.values("x") == {"baseline": 0.625}


def test_spo_by_hand() -> None:
    """prior (0.5, 0.5): p̂ 0.5; a = r - 0.5 = [0.5, -0.5, 0.5, 0.5], whitened with the
    unbiased std 0.5 (mean 0.25): [0.5, -1.5, 0.5, 0.5]. Then α_0 = 0.875·0.5 + 1,
    β_0 = 0.875·0.5 + 1 (prompt 0: r 1, 0), α_1 = 0.4375 + 2, β_1 = 0.4375."""
    state = EstimatorState()
    result = spo([1, 0, 1, 1], [0, 0, 1, 1], state)
    np.testing.assert_allclose(result.advantages, [0.5, -1.5, 0.5, 0.5], rtol=1e-7)
    assert state.values(0) == {"alpha": 1.4375, "beta": 1.4375}
    assert state.values(1) == {"alpha": 2.4375, "beta": 0.4375}
    # step 2: p̂_0 = 0.5, p̂_1 = 2.4375 / 2.875; a = r - p̂
    p1 = 2.4375 / 2.875
    a = np.array([1 - 0.5, 0 - p1])
    expected = (a - a.mean()) / (a.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(spo([1, 0], [0, 1], state).advantages, expected, rtol=1e-12)


def test_spo_prior_table_is_read_for_unseen_prompts_only() -> None:
    """Offline pass rates as the prior of each prompt's first sighting: α0 = 4·0.9,
    β0 = 4·0.1 for "easy"; a remembered prompt ignores the table."""
    state = EstimatorState()
    alpha0, beta0 = np.array([3.6, 3.6, 0.4]), np.array([0.4, 0.4, 3.6])
    spo([1, 1, 0], ["easy", "easy", "hard"], state, prior=(alpha0, beta0), rho=1.0)
    assert state.values("easy") == {"alpha": 5.6, "beta": 0.4}
    assert state.values("hard") == pytest.approx({"alpha": 0.4, "beta": 4.6})
    spo([0, 0, 0], ["easy", "easy", "hard"], state, prior=(alpha0 * 9, beta0 * 9), rho=1.0)
    assert state.values("easy") == pytest.approx({"alpha": 5.6, "beta": 2.4})


def test_spo_kl_adaptive_rho_one_value_per_prompt() -> None:
    state = EstimatorState()
    spo([1, 0, 1], ["a", "a", "b"], state, rho=[0.9, 0.9, 0.96])
    assert state.values("a") == pytest.approx({"alpha": 0.45 + 1, "beta": 0.45 + 1})
    assert state.values("b") == pytest.approx({"alpha": 0.48 + 1, "beta": 0.48})
    with pytest.raises(ValueError, match=r"^rho: expected one value per prompt"):
        spo([1, 0], ["a", "a"], state, rho=[0.9, 0.96])


def test_spo_rho_by_hand_and_against_the_reference_formula() -> None:
    """ρ = clip(2^(-D/0.06), 0.875, 0.96): D = 0 (a prompt seen first) -> 0.96, D = 0.06
    (one half life) -> 0.5 -> 0.875, D = 0.005 -> 2^(-1/12) = 0.94387..."""
    assert spo_rho([0.0, 0.005, 0.06]).tolist() == pytest.approx([0.96, 2 ** (-1 / 12), 0.875])
    drift = np.random.default_rng(0).exponential(0.01, 64)
    want = [min(max(2.0 ** (-d / 0.02), 0.5), 0.99) for d in drift.tolist()]
    got = spo_rho(drift, clip_lower=0.5, clip_upper=0.99, half_life=0.02)
    np.testing.assert_allclose(got, want, rtol=1e-15)


@pytest.mark.parametrize(
    ("drift", "options", "message"),
    [
        ([0.1, -0.01], {}, r"^drift: expected finite values >= 0 .*got -0.01 at 1"),
        ([math.nan], {}, r"^drift: expected finite values >= 0"),
        ([0.1], {"clip_lower": 0.97}, r"^clip_lower: expected at most clip_upper \(0.96\)"),
        ([0.1], {"clip_upper": 1.5}, r"^clip_upper: expected a number in \[0, 1\]"),
        ([0.1], {"half_life": 0}, r"^half_life: "),
    ],
)
def test_spo_rho_refuses_bad_input(drift: Any, options: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spo_rho(drift, **options)


def test_unrewarded_prompts_are_not_touched() -> None:
    """nan_policy="omit": a NaN row gets 0 and is not valid; a prompt whose rows are all
    NaN is neither scored nor remembered."""
    state = EstimatorState()
    result = compute_advantages(
        np.array([1.0, math.nan, math.nan, 0.0]), "rae", group_size=1,
        prompt_ids=["a", "a", "b", "c"], state=state, nan_policy="omit", decay=0.5,
    )  # fmt: skip
    assert result.advantages.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert result.valid.tolist() == [True, False, False, True]
    assert state.values("a") == {"baseline": 0.5}
    assert state.values("b") is None
    assert len(state) == 2


def test_groups_are_not_the_memory() -> None:
    """The grouping arguments only decide what counts as skipped (a group without any
    reward): the same rows give the same advantages grouped in 2 or 1, and no warning."""
    rewards, prompts = [1.0, 0.0, 0.0, 1.0], ["a", "a", "b", "b"]
    one, two = EstimatorState(), EstimatorState()
    by_one = spo(rewards, prompts, one).advantages
    by_two = compute_advantages(
        np.array(rewards), "spo", group_size=2, prompt_ids=prompts, state=two
    ).advantages
    np.testing.assert_array_equal(by_one, by_two)
    assert one.state_dict() == two.state_dict()


def test_a_weight_multiplies_a_stateful_estimator() -> None:
    state, plain = EstimatorState(), EstimatorState()
    rewards, prompts = [1.0, 0.0, 0.0, 0.0], ["a", "a", "b", "b"]
    weighted = compute_advantages(
        np.array(rewards), "rae", group_size=2, prompt_ids=prompts, state=state,
        group_weight=lambda p: 2 * p + 1,
    )  # fmt: skip
    base = rae(rewards, prompts, plain)
    np.testing.assert_allclose(weighted.advantages, np.array(base) * [2, 2, 1, 1])


def test_torch_rows_and_ids() -> None:
    torch = pytest.importorskip("torch")
    state, twin = EstimatorState(), EstimatorState()
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float32)
    ids = torch.tensor([3, 3, 9, 9])
    got = compute_advantages(rewards, "spo", group_size=2, prompt_ids=ids, state=state)
    assert isinstance(got.advantages, torch.Tensor)
    assert got.advantages.dtype == torch.float32
    want = spo(rewards.numpy(), [3, 3, 9, 9], twin).advantages
    np.testing.assert_allclose(got.advantages.numpy(), want, rtol=1e-6)
    assert state.state_dict() == twin.state_dict()


# -- properties ----------------------------------------------------------------------------

ROLLOUTS = st.lists(
    st.tuples(st.sampled_from(["p", "q", "r", 4, 5]), st.sampled_from([0.0, 0.25, 1.0])),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(ROLLOUTS, min_size=1, max_size=4), name=st.sampled_from(["spo", "rae"]))
def test_a_saved_state_continues_exactly(steps: list[list[tuple[Any, float]]], name: str) -> None:
    """At every step, a state rebuilt from the JSON of the last one gives exactly the
    advantages (and the next state) of the state that was never saved; both follow the
    float64 reference."""
    kept, memory = EstimatorState(), {}
    for rows in steps:
        prompts = [p for p, _ in rows]
        rewards = np.array([r for _, r in rows])
        reloaded = EstimatorState.from_state_dict(json.loads(json.dumps(kept.state_dict())))
        a = compute_advantages(rewards, name, group_size=1, prompt_ids=prompts, state=kept)
        b = compute_advantages(rewards, name, group_size=1, prompt_ids=prompts, state=reloaded)
        np.testing.assert_array_equal(a.advantages, b.advantages)
        assert kept.state_dict() == reloaded.state_dict()
        expected = reference(name, rewards, range(len(rows)), memory=memory, prompt_ids=prompts)
        np.testing.assert_allclose(a.advantages, expected, rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(rows=ROLLOUTS, seed=st.integers(0, 2**16))
def test_order_of_the_rows_does_not_matter(rows: list[tuple[Any, float]], seed: int) -> None:
    """Scoring against the memory at the start of the call and one update per prompt: a
    shuffled batch gets the same advantages, row for row, and leaves the same memory."""
    order = np.random.default_rng(seed).permutation(len(rows))
    for name in ("spo", "rae"):
        first, second = EstimatorState(), EstimatorState()
        warm = [(p, 1.0) for p, _ in rows]  # something to remember first
        for state in (first, second):
            compute_advantages(
                np.array([r for _, r in warm]), name, group_size=1,
                prompt_ids=[p for p, _ in warm], state=state,
            )  # fmt: skip
        prompts, rewards = [p for p, _ in rows], np.array([r for _, r in rows])
        a = compute_advantages(rewards, name, group_size=1, prompt_ids=prompts, state=first)
        b = compute_advantages(
            rewards[order], name, group_size=1, prompt_ids=[prompts[i] for i in order],
            state=second,
        )  # fmt: skip
        np.testing.assert_allclose(b.advantages, a.advantages[order], rtol=1e-12, atol=1e-12)
        assert first.state_dict().keys() == second.state_dict().keys()
        for prompt in set(prompts):
            assert first.values(prompt) == pytest.approx(second.values(prompt), rel=1e-12)


def test_an_empty_state_round_trips_and_copies_are_independent() -> None:
    empty = EstimatorState.from_state_dict(json.loads(json.dumps(EstimatorState().state_dict())))
    assert len(empty) == 0
    assert empty.estimator is None
    state = EstimatorState()
    rae([1.0], ["a"], state)
    copy = state.copy()
    rae([1.0], ["a"], copy)
    assert state.values("a") == {"baseline": pytest.approx(0.05)}
    assert copy.values("a") != state.values("a")


# -- bad input -----------------------------------------------------------------------------


def test_errors_name_the_argument() -> None:
    r = np.array([1.0, 0.0])
    with pytest.raises(ValueError, match=r"^state: estimator 'spo' remembers"):
        compute_advantages(r, "spo", group_size=1, prompt_ids=["a", "b"])
    with pytest.raises(ValueError, match=r"^prompt_ids: estimator 'rae' needs"):
        compute_advantages(r, "rae", group_size=1, state=EstimatorState())
    with pytest.raises(ValueError, match=r"^prompt_ids: expected one identity per rollout \(2\)"):
        compute_advantages(r, "rae", group_size=1, state=EstimatorState(), prompt_ids=["a"])
    with pytest.raises(TypeError, match=r"^state: expected an advbudget.EstimatorState"):
        compute_advantages(r, "rae", group_size=1, state={}, prompt_ids=["a", "b"])
    with pytest.raises(TypeError, match=r"^prompt_ids: expected a list or a 1-D array"):
        compute_advantages(r, "rae", group_size=1, state=EstimatorState(), prompt_ids="ab")
    with pytest.raises(
        ValueError,
        match=r"^rewards: estimator 'spo' counts successes.*got 2\.0 \(1 of 2 rewards outside\)$",
    ):
        spo([1.0, 2.0], ["a", "b"], EstimatorState())
    with pytest.raises(ValueError, match=r"^prior: expected \(alpha0, beta0\)"):
        spo([1.0], ["a"], EstimatorState(), prior=0.5)
    with pytest.raises(ValueError, match=r"^prior: expected a positive"):
        spo([1.0], ["a"], EstimatorState(), prior=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"^rho: expected a number in \[0, 1\]"):
        spo([1.0], ["a"], EstimatorState(), rho=1.5)
    with pytest.raises(ValueError, match=r"^rho: 'kl' is measured by a trainer adapter.*spo_rho"):
        spo([1.0], ["a"], EstimatorState(), rho="kl")
    with pytest.raises(ValueError, match=r"^decay: expected a number in \[0, 1\)"):
        rae([1.0], ["a"], EstimatorState(), decay=1.0)
    with pytest.raises(ValueError, match=r"^state: estimator 'grpo' keeps no memory"):
        compute_advantages(r, "grpo", group_size=2, state=EstimatorState())
    with pytest.raises(ValueError, match=r"^prompt_ids: estimator 'grpo' keeps no memory"):
        compute_advantages(r, "grpo", group_size=2, prompt_ids=["a", "a"])


def test_a_state_serves_one_estimator_and_a_failed_call_changes_nothing() -> None:
    state = EstimatorState()
    rae([1.0, 0.0], ["a", "b"], state)
    saved = state.state_dict()
    with pytest.raises(ValueError, match=r"^state: this EstimatorState belongs to estimator 'rae'"):
        spo([1.0], ["a"], state)
    with pytest.raises(ValueError, match=r"^rewards: expected finite numbers"):
        rae([math.nan, 1.0], ["a", "b"], state)
    assert state.state_dict() == saved


def test_a_state_dict_of_another_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^state: expected an EstimatorState.state_dict\(\) of"):
        EstimatorState.from_state_dict({"version": 99})
    with pytest.raises(ValueError, match=r"^state: expected an EstimatorState.state_dict"):
        EstimatorState.from_state_dict([1, 2])  # type: ignore[arg-type]


def test_assert_memory_replays_sees_a_lost_memory() -> None:
    """The check the real-loop tests use: a run whose third call lost its memory (a bad
    resume) fails it; the run itself passes."""
    from advbudget.testing import assert_memory_replays

    prompts = ["a", "a", "b", "b"]
    steps = [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]]

    def run(states: list[EstimatorState]) -> list[dict[str, Any]]:
        return [
            {"prompt_ids": prompts, "rewards": r, "advantages": rae(r, prompts, s, decay=0.5)}
            for r, s in zip(steps, states, strict=False)
        ]

    kept = EstimatorState()
    assert_memory_replays(run([kept, kept, kept]), "rae", decay=0.5)
    lost = EstimatorState()
    with pytest.raises(AssertionError, match="call 2: not the advantages of an uninterrupted"):
        assert_memory_replays(run([lost, lost, EstimatorState()]), "rae", decay=0.5)
    with pytest.raises(AssertionError, match="cannot tell a memory kept from one lost"):
        assert_memory_replays(run([EstimatorState()]), "rae", decay=0.5)  # one call only


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-3, 5), max_size=40), st.integers(1, 4))
def test_rollouts_by_prompt_are_numpys_unique(ids: list[int], repeat: int) -> None:
    """The call's prompts, their first rollout and each rollout's prompt (``_by_prompt``,
    which sorts one key per run of equal adjacent keys and finds first runs without a
    stable sort) are ``np.unique(..., return_index=True, return_inverse=True)``'s, with
    rollouts side by side (runs) or apart."""
    from advbudget.core._state import _by_prompt

    keys = np.repeat(np.array(ids, dtype=np.int64), repeat)
    for order in (keys, keys[::-1], np.random.default_rng(len(ids)).permutation(keys)):
        unique, first, inverse = _by_prompt(order)
        want = np.unique(order, return_index=True, return_inverse=True)
        for got, expected in zip((unique, first, inverse), want, strict=True):
            np.testing.assert_array_equal(got, expected.reshape(-1))
