"""The trainer features written once (``advbudget/adapters/_features.py``), framework-free:
hand values, and the invariants every adapter relies on."""

from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advbudget import compute_advantages
from advbudget._ledger import PromptLedger
from advbudget.adapters._features import (
    Step,
    defined,
    dropped_rows,
    group_prompts,
    kappa_due,
    kappa_rows,
    kept_groups,
    may_resample,
    per_sample_metrics,
    resample_plan,
    sampled_group_metrics,
    step_metrics,
    update_ledger,
)
from advbudget.adapters._options import AdapterOptions

OPTIONS = AdapterOptions("trl", estimator_options={"nan_policy": "omit"})


def step(rewards: list[float], group_size: int, **options: object) -> Step:
    chosen = AdapterOptions("trl", **options)  # type: ignore[arg-type]
    result = compute_advantages(
        np.asarray(rewards, dtype=np.float64), "budget", group_size=group_size, nan_policy="omit"
    )
    return Step(result, chosen)


def test_hand_values() -> None:
    # groups: [1, 0] solved once, [1, 1] all solved (skipped), [0, nan] unsolved (skipped)
    s = step([1.0, 0.0, 1.0, 1.0, 0.0, math.nan], 2, skipped_groups="drop")
    metrics = step_metrics(s)
    assert metrics["advbudget/skipped_group_fraction"] == pytest.approx(2 / 3)
    assert metrics["advbudget/solved_group_fraction"] == pytest.approx(1 / 3)
    assert metrics["advbudget/unsolved_group_fraction"] == pytest.approx(1 / 3)
    assert metrics["advbudget/nan_reward_fraction"] == pytest.approx(1 / 6)
    assert dropped_rows(s) == [2, 3, 4, 5]
    assert dropped_rows(Step(s.result, AdapterOptions("trl"))) == []  # keep: none
    assert kept_groups(s.result) == [0]
    assert kept_groups(s.result, range(1, 3)) == []
    assert group_prompts(s, ["p", "p", "q", "q", "r", "r"]) == ["p", "q", "r"]
    assert len(kappa_rows(s)) == 1


def test_nan_metrics_are_left_out() -> None:
    s = step([1.0, 1.0, 0.0, 0.0], 2)  # every group skipped: no advantage gap
    assert "advbudget/advantage_gap_mean" not in step_metrics(s)
    assert "advbudget/advantage_gap_mean" not in per_sample_metrics(s)
    assert defined({"x": math.nan, "y": 2}) == {"y": 2.0}


@settings(max_examples=60, deadline=None)
@given(
    rewards=hnp.arrays(
        np.float64,
        st.integers(1, 6).map(lambda groups: groups * 3),
        elements=st.sampled_from([0.0, 0.5, 1.0, math.nan]),
    ),
    solved=st.sampled_from([1.0, 0.5, None]),
    weight=st.sampled_from([None, "grpo_lead", "dqw"]),
)
def test_per_sample_means_are_the_batch_metrics(
    rewards: np.ndarray, solved: float | None, weight: str | None
) -> None:
    """A framework that logs the mean of per-sample values logs the batch's metrics."""
    result = compute_advantages(
        rewards, "budget", group_size=3, nan_policy="omit", group_weight=weight
    )
    s = Step(result, AdapterOptions("openrlhf", solved_reward=solved))
    batch = step_metrics(s)
    per_sample = per_sample_metrics(s)
    assert per_sample.keys() == batch.keys()
    for key, values in per_sample.items():
        assert len(values) == len(rewards)
        assert float(np.mean(values)) == pytest.approx(batch[key], rel=1e-12, abs=1e-12), key


def test_torch_results_give_the_same_metrics() -> None:
    torch = pytest.importorskip("torch")
    rewards = [1.0, 0.0, 0.5, 0.5, 1.0, math.nan]
    ours = step(rewards, 2)
    result = compute_advantages(
        torch.tensor(rewards, dtype=torch.float64), "budget", group_size=2, nan_policy="omit"
    )
    theirs = Step(result, ours.options)
    assert step_metrics(theirs) == pytest.approx(step_metrics(ours))
    assert per_sample_metrics(theirs) == per_sample_metrics(ours)


def test_the_ledger_is_updated_once_per_group() -> None:
    ledger = PromptLedger()
    s = step([1.0, 0.0, 0.0, 0.0], 2)
    # the fractions are over prompts seen twice: none yet (NaN, left out)
    assert update_ledger(ledger, s, ["p", "q"]) == {"advbudget/recurring_prompts": 0.0}
    assert len(ledger) == 2
    assert update_ledger(ledger, s, ["p", "q"]) == {
        "advbudget/never_solved_prompt_fraction": 0.5,
        "advbudget/always_solved_prompt_fraction": 0.0,
        "advbudget/recurring_prompts": 2.0,
    }
    off = Step(s.result, AdapterOptions("trl", solved_reward=None))
    assert update_ledger(ledger, off, ["p", "q"]) == {}
    assert len(ledger) == 2


def test_kappa_every() -> None:
    every = AdapterOptions("verl", kappa_every=3)
    assert [n for n in range(1, 10) if kappa_due(every, n)] == [3, 6, 9]
    assert not any(kappa_due(AdapterOptions("trl", kappa_every=0), n) for n in range(1, 5))


def test_resample_plan_and_its_cap() -> None:
    assert resample_plan([[0, 1, 2]], need=2, groups_per_round=3).picks == [(0, 0), (0, 1)]
    short = resample_plan([[], [1]], need=2, groups_per_round=2)
    assert short.short == 1
    assert short.picks == [(1, 1), (0, 0)]
    capped = AdapterOptions("trl", max_generation_batches=2)
    assert may_resample(capped, rounds=1, short=1)
    assert not may_resample(capped, rounds=2, short=1)
    assert not may_resample(capped, rounds=1, short=0)


def test_sampled_group_metrics_count_every_round() -> None:
    rounds = [step([1.0, 1.0, 1.0, 0.0], 2), step([0.0, 0.0, 0.5, 1.0], 2)]
    metrics = sampled_group_metrics(rounds)
    assert metrics["advbudget/skipped_group_fraction"] == 0.5
    assert metrics["advbudget/solved_group_fraction"] == 0.25
    assert metrics["advbudget/unsolved_group_fraction"] == 0.25
    assert sampled_group_metrics([]) == {}


def test_the_published_result_is_taken_once_and_only_for_its_rows() -> None:
    from advbudget.adapters._features import publish, take_published

    s = step([1.0, 0.0, 0.5, 0.5], 2)
    publish(s.result)
    assert take_published(rows=3) is None  # another batch: not this result, and cleared
    assert take_published(rows=4) is None
    publish(s.result)
    assert take_published(rows=4) is s.result
    assert take_published(rows=4) is None


def test_the_group_weight_is_read_once_for_every_framework() -> None:
    """One parser: a name, a config's mapping, a command line's JSON, off words; refusals
    name the framework's key; the keywords reach compute_advantages with solved_reward."""
    from advbudget.adapters._options import UNSET
    from advbudget.core import get_convention, get_spec

    def parse(**given: object) -> AdapterOptions:
        return AdapterOptions.parse(
            lambda name: given.get(name, UNSET),
            get_convention("openrlhf"),
            key=lambda name: f"--advbudget.{name}",
        )

    assert parse().weight_keywords() == {}
    assert parse(group_weight="none").group_weight is None
    lead = parse(group_weight="grpo_lead", solved_reward="none")
    assert lead.weight_keywords() == {"group_weight": lead.group_weight, "solved_reward": 1.0}
    dqw = parse(group_weight='{"name": "dqw", "temperature": 0.5}', solved_reward=0.5, budget=2)
    assert dqw.group_weight is not None
    assert dqw.group_weight.options == {"temperature": 0.5}
    keywords = dqw.compute_keywords(get_spec("budget"))
    assert keywords == {"budget": 2.0, "group_weight": dqw.group_weight, "solved_reward": 0.5}
    assert "budget" not in dqw.compute_keywords(get_spec("grpo"))
    with pytest.raises(ValueError, match=r"^--advbudget\.group_weight: expected one of"):
        parse(group_weight="lead")
    with pytest.raises(ValueError, match=r"^--advbudget\.group_weight temperature: expected"):
        parse(group_weight={"name": "dqw", "temperature": -1})
    with pytest.raises(ValueError, match=r"^--advbudget\.group_weight: expected a weight name"):
        parse(group_weight="{name: dqw}")
    rewards = np.array([1.0, 0, 0, 0])
    given = compute_advantages(rewards, "dr", group_size=4, **lead.compute_keywords(get_spec("dr")))
    expected = compute_advantages(rewards, "dr", group_size=4, group_weight="grpo_lead")
    np.testing.assert_array_equal(given.advantages, expected.advantages)
