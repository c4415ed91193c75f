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


def test_lent_versions_reach_the_calls_of_this_thread_only() -> None:
    import threading

    from advbudget.adapters._features import lend_versions, lent_versions

    run = AdapterOptions("tunix", max_staleness=0, stale_rollouts="drop")
    assert lent_versions(4) == {}  # nothing lent: a call without versions
    seen: list[dict[str, object]] = []
    with lend_versions(run, [2, 2, 1, 2], 2):
        keywords = lent_versions(4)
        assert keywords == {
            "policy_versions": [2, 2, 1, 2],
            "current_version": 2,
            "max_staleness": 0,
            "stale_rollouts": "drop",
        }
        rewards = np.array([1.0, 0.0, 1.0, 0.5])
        got = compute_advantages(rewards, "budget", group_size=4, **keywords)
        masked = np.array([1.0, 0.0, math.nan, 0.5])  # drop: row 2 as if never sampled
        want = compute_advantages(masked, "budget", group_size=4, nan_policy="omit")
        np.testing.assert_allclose(got.advantages, want.advantages, rtol=0, atol=1e-15)
        with pytest.raises(
            ValueError, match=r"^policy_versions: expected one version per .*\(3\), got 4"
        ):
            lent_versions(3)  # another call's rewards: not these versions
        worker = threading.Thread(target=lambda: seen.append(lent_versions(4)))
        worker.start()
        worker.join()
        with lend_versions(run, [0], 0):  # nested: the inner loan, then the outer again
            assert lent_versions(1)["current_version"] == 0
        assert lent_versions(4)["current_version"] == 2
    assert seen == [{}]
    assert lent_versions(4) == {}


def test_the_group_weight_is_read_once_for_every_framework() -> None:
    """One parser: a name, a config's mapping, a command line's JSON, off words; refusals
    name the framework's key; the keywords reach compute_advantages with solved_reward."""
    from advbudget.adapters import get_convention
    from advbudget.adapters._options import UNSET
    from advbudget.core import get_spec

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


def test_kl_rho_is_read_once_and_refused_off_spo() -> None:
    """``rho="kl"`` (any case) is the adapter's to measure, never an estimator option;
    ``check_memory`` refuses it for an estimator without ``rho``, naming the key."""
    from advbudget.adapters import get_convention
    from advbudget.adapters._features import check_memory
    from advbudget.adapters._options import UNSET
    from advbudget.core import get_spec

    def parse(**given: object) -> AdapterOptions:
        return AdapterOptions.parse(lambda name: given.get(name, UNSET), get_convention("verl"))

    kl = parse(rho=" KL")
    assert kl.kl_rho
    assert "rho" not in kl.estimator_options
    assert not parse(rho=0.9).kl_rho
    assert parse(rho=0.9).estimator_options["rho"] == 0.9
    check_memory(get_spec("spo"), kl, lambda name: f"algorithm.advbudget.{name}")
    with pytest.raises(ValueError, match=r"^algorithm\.advbudget\.rho: 'kl' is spo's"):
        check_memory(get_spec("rae"), kl, lambda name: f"algorithm.advbudget.{name}")
    with pytest.raises(ValueError, match=r"^rho: expected a number in \[0, 1\] or 'kl'"):
        parse(rho="fast")


class _Policy:
    """A stand-in for a trainer's forward: response r's token log-probs are
    ``-shift * (1 + token index)`` under the policy of the moment; ``now`` and ``rescore``
    record what they were asked."""

    def __init__(self) -> None:
        self.shift = 0.0
        self.asked: list[list[int]] = []
        self.rescored: list[list[str]] = []

    def logps(self, handle: str) -> np.ndarray:
        length = int(handle.split(":")[1])
        return -self.shift * (1 + np.arange(length))

    def now(self, rows: list[int]) -> tuple[list[str], list[np.ndarray]]:
        self.asked.append(rows)
        handles = [f"row{r}:{r + 1}" for r in rows]
        return handles, [self.logps(h) for h in handles]

    def rescore(self, handles: list[str]) -> list[np.ndarray]:
        self.rescored.append(handles)
        return [self.logps(h) for h in handles]


def test_last_responses_measure_each_prompts_drift_by_hand() -> None:
    """Step 1 keeps each prompt's last row (a: row 1, b: row 2); at step 2 the policy has
    moved by 0.004 per token position: a's kept response (2 tokens) drifts by
    mean(0.004, 0.008) = 0.006, so ρ = 2^(-0.006/0.06) = 2^(-0.1); c is new (0.96)."""
    from advbudget.adapters._features import LastResponses

    kept, policy = LastResponses(), _Policy()
    rho, metrics = kept.rho(["a", "a", "b"], policy.now, policy.rescore, prefix="x/")
    assert rho.tolist() == [0.96] * 3
    assert policy.asked == [[1, 2]]
    assert policy.rescored == [[]]
    assert metrics == {"x/spo_drift_mean": 0.0, "x/spo_rho_mean": 0.96,
                       "x/spo_first_seen_fraction": 1.0}  # fmt: skip
    policy.shift = 0.004
    rho, metrics = kept.rho(["c", "a", "a"], policy.now, policy.rescore)
    assert policy.rescored[-1] == ["row1:2"]
    assert rho.tolist() == pytest.approx([0.96, 2**-0.1, 2**-0.1])
    assert metrics["spo_drift_mean"] == pytest.approx(0.003)
    assert metrics["spo_first_seen_fraction"] == 0.5
    assert len(kept) == 3  # a replaced by its new last response (row 2), b kept, c added
    policy.shift = 0.05
    rho, _ = kept.rho(["a"], policy.now, policy.rescore)
    assert policy.rescored[-1] == ["row2:3"]  # a's response of step 2, not step 1's
    assert rho.tolist() == pytest.approx([0.875])  # D = 0.092 > one half life: clipped


def test_last_responses_on_several_processes() -> None:
    """Each process keeps the responses of its own rows (``local``), measures the prompts
    it holds and shares the drifts; a prompt whose last row moved to another process is
    dropped here (the other keeps it)."""
    from advbudget.adapters._features import LastResponses

    first, second = LastResponses(), LastResponses()
    p1, p2 = _Policy(), _Policy()
    shared: dict[str, float] = {}

    def share(drift: dict[str, float]) -> dict[str, float]:
        shared.update(drift)
        return dict(shared)

    prompts = ["a", "a", "b", "b"]
    first.rho(prompts, p1.now, p1.rescore, local=range(0, 2), share=share)
    second.rho(prompts, p2.now, p2.rescore, local=range(2, 4), share=share)
    assert (len(first), len(second)) == (1, 1)
    p1.shift = p2.shift = 0.004
    shared.clear()
    swapped = ["b", "b", "a", "a"]
    first.rho(swapped, p1.now, p1.rescore, local=range(0, 2), share=share)
    rho, _ = second.rho(swapped, p2.now, p2.rescore, local=range(2, 4), share=share)
    assert p1.rescored[-1] == ["row1:2"]
    assert p2.rescored[-1] == ["row3:4"]
    # b (row 3, 4 tokens): D = 0.004 * 2.5 = 0.01; a (row 1, 2 tokens): D = 0.006.
    assert rho.tolist() == pytest.approx([2 ** (-1 / 6)] * 2 + [2**-0.1] * 2)
    assert first._kept.keys() == {"b"}
    assert second._kept.keys() == {"a"}


def test_last_responses_refuse_a_response_that_changed_length() -> None:
    from advbudget.adapters._features import LastResponses

    kept, policy = LastResponses(), _Policy()
    kept.rho(["a"], policy.now, policy.rescore)
    with pytest.raises(RuntimeError, match=r"prompt 'a''s last response came back with"):
        kept.rho(["a"], policy.now, lambda handles: [np.zeros(5)])


def test_run_memory_gives_rho_to_training_calls_only() -> None:
    from advbudget.adapters._features import RunMemory, lend_memory, lent_keywords
    from advbudget.core import get_spec

    memory, rho = RunMemory(), np.array([0.9, 0.9])
    assert memory.keywords(get_spec("spo"), ["a", "a"], "?", rho=rho)["rho"] is rho
    assert "rho" not in memory.keywords(get_spec("spo"), ["a", "a"], "?", remember=False, rho=rho)
    with lend_memory(memory, ["a", "a"], rho=rho):
        assert lent_keywords(get_spec("spo"), 2, "?")["rho"] is rho
    assert "last_responses" not in str(memory.state_dict())


def test_a_lent_rho_function_is_called_by_an_estimator_with_memory_only() -> None:
    """tunix lends what measures ρ (its step has no responses when the loan starts): it is
    called when an estimator with memory asks, once a call, and never for the others."""
    from advbudget.adapters._features import RunMemory, lend_memory, lent_keywords
    from advbudget.core import get_spec

    asked: list[int] = []

    def measure() -> np.ndarray:
        asked.append(1)
        return np.array([0.9, 0.9])

    with lend_memory(RunMemory(), ["a", "a"], rho=measure):
        assert lent_keywords(get_spec("budget"), 2, "?") == {}
        assert not asked
        assert lent_keywords(get_spec("spo"), 2, "?")["rho"].tolist() == [0.9, 0.9]
    assert asked == [1]
