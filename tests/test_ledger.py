"""The per-prompt ledger (advbudget.metrics.PromptLedger) and prompt identities."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages
from advbudget.metrics import PromptLedger, group_outcomes, prompt_key


def outcomes(rewards: list[float], group_size: int = 2):  # type: ignore[no-untyped-def]
    result = compute_advantages(np.array(rewards), "budget", group_size=group_size)
    return group_outcomes(result)


def test_two_epochs_of_0_1_rewards_hand_counted() -> None:
    ledger = PromptLedger()
    # epoch 1: a unsolved, b solved, c mixed, d unsolved
    ledger.update(["a", "b", "c", "d"], outcomes([0, 0, 1, 1, 1, 0, 0, 0]))
    assert ledger.metrics()["recurring_prompts"] == 0.0
    assert math.isnan(ledger.metrics()["never_solved_prompt_fraction"])
    # epoch 2, shuffled: d now half solved, the rest as before
    ledger.update(["d", "c", "b", "a"], outcomes([1, 0, 0, 1, 1, 1, 0, 0]))
    assert ledger.metrics() == {
        "never_solved_prompt_fraction": 1 / 4,  # a
        "always_solved_prompt_fraction": 1 / 4,  # b
        "recurring_prompts": 4.0,
    }


def test_plus_minus_one_graded_and_nan_rewards() -> None:
    ledger = PromptLedger()
    for _ in range(2):
        # ±1: p unsolved; graded: q's 0.9 and 0.95 never reach 1; r all NaN: not counted
        result = compute_advantages(
            np.array([-1.0, -1.0, 0.9, 0.95, np.nan, np.nan, 1.0, np.nan]),
            "budget",
            group_size=2,
            nan_policy="omit",
        )
        ledger.update(["p", "q", "r", "s"], group_outcomes(result))
    metrics = ledger.metrics()
    assert metrics["recurring_prompts"] == 3.0  # p, q, s (its one scored rollout solved)
    assert metrics["never_solved_prompt_fraction"] == 2 / 3
    assert metrics["always_solved_prompt_fraction"] == 1 / 3
    assert len(ledger) == 3


def test_one_mixed_epoch_ends_never_and_always() -> None:
    ledger = PromptLedger()
    ledger.update(["a", "b"], outcomes([0, 0, 1, 1]))
    ledger.update(["a", "b"], outcomes([0, 1, 0, 1]))
    ledger.update(["a", "b"], outcomes([0, 0, 1, 1]))
    assert ledger.metrics()["never_solved_prompt_fraction"] == 0.0
    assert ledger.metrics()["always_solved_prompt_fraction"] == 0.0


def test_state_round_trips_through_json() -> None:
    ledger = PromptLedger()
    ledger.update([3, 7], outcomes([0, 0, 1, 1]))
    restored = PromptLedger()
    restored.load_state_dict(json.loads(json.dumps(ledger.state_dict())))
    for book in (ledger, restored):
        book.update([7, 3], outcomes([1, 1, 0, 0]))
    assert (
        restored.metrics()
        == ledger.metrics()
        == {
            "never_solved_prompt_fraction": 0.5,
            "always_solved_prompt_fraction": 0.5,
            "recurring_prompts": 2.0,
        }
    )


def test_max_prompts_bounds_the_ledger() -> None:
    ledger = PromptLedger(max_prompts=2)
    ledger.update(["a", "b", "c"], outcomes([0, 0, 1, 1, 0, 1]))
    assert len(ledger) == 2
    assert ledger.untracked_prompts == 1


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match="prompts: expected one identity per group"):
        PromptLedger().update(["a"], outcomes([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="max_prompts"):
        PromptLedger(max_prompts=0)
    with pytest.raises(ValueError, match="state: expected a PromptLedger state"):
        PromptLedger().load_state_dict({"version": 99})
    with pytest.raises(TypeError, match="prompt: expected"):
        prompt_key(object())


def test_prompt_key_is_blake2b_of_the_text_and_json_of_messages() -> None:
    digest = hashlib.blake2b(b"2+2?", digest_size=8).digest()
    assert prompt_key("2+2?") == int.from_bytes(digest, "little") >> 1
    chat = [{"role": "user", "content": "2+2?"}]
    assert prompt_key(chat) == prompt_key([{"content": "2+2?", "role": "user"}])
    assert prompt_key(chat) != prompt_key("2+2?")
    assert prompt_key(5) == 5
    # a numpy index is the same int (a list of them is what a numpy column iterates to)
    assert prompt_key(np.int64(5)) == prompt_key(np.uint8(5)) == 5
    assert type(prompt_key(np.int32(5))) is int
    with pytest.raises(TypeError, match=r"^prompt: expected .* got a bool$"):
        prompt_key(np.True_)
    assert 0 <= prompt_key("x" * 1_000_000) < 2**63


rewards3 = st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=3, max_size=3)
occurrence = st.tuples(st.integers(0, 5), rewards3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(occurrence, min_size=1, max_size=6), min_size=1, max_size=5))
def test_ledger_equals_a_recount_of_every_occurrence(steps) -> None:  # type: ignore[no-untyped-def]
    ledger = PromptLedger()
    history: dict[int, list[list[float]]] = {}
    for step in steps:
        prompts = [prompt for prompt, _ in step]
        rewards = [r for _, group in step for r in group]
        ledger.update(prompts, outcomes(rewards, group_size=3))
        for prompt, group in step:
            history.setdefault(prompt, []).append(group)
    recurring = {p: groups for p, groups in history.items() if len(groups) >= 2}
    metrics = ledger.metrics()
    assert metrics["recurring_prompts"] == len(recurring)
    if recurring:
        never = sum(all(max(g) < 1 for g in groups) for groups in recurring.values())
        always = sum(all(min(g) >= 1 for g in groups) for groups in recurring.values())
        assert metrics["never_solved_prompt_fraction"] == never / len(recurring)
        assert metrics["always_solved_prompt_fraction"] == always / len(recurring)


def test_every_backend_gives_the_numpy_ledger(xp) -> None:  # type: ignore[no-untyped-def]
    rewards = [0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    expected, actual = PromptLedger(), PromptLedger()
    for _ in range(2):
        expected.update(["a", "b", "c"], outcomes(rewards))
        result = compute_advantages(xp.asarray(rewards), "budget", group_size=2)
        actual.update(["a", "b", "c"], group_outcomes(result))
    assert actual.metrics() == expected.metrics()
    assert actual.metrics()["never_solved_prompt_fraction"] == 1 / 3
