"""verl 0.9.1's multi-turn rollouts, end to end on CPU, with ``reward_budget``.

Each run is the example's CPU command line (``CPU_LOOP=1 bash examples/verl_qwen3.sh``, as
in ``test_loop.py``) with verl's multi-turn agent loop and the harness's calculator tool,
called after every assistant turn (``cpu_loop/verlcpu/tools.py``; a random tiny model
writes no tool call of its own), 3 assistant turns of at most 8 tokens
(``VERLCPU_TURN_TOKENS``), 4 prompts x 4 rollouts, one step. Assertions read the probe
(``verlcpu.probe``: each row's uid, reward, advantage range over its response tokens and
assistant turns, and the V1 trainer's batch keys, read from verl's frame) and verl's file
logger; the oracle is the core's ``compute_advantages`` on what verl's tensors hold.

- A: verl's ``tool_agent`` loop (``ToolAgentLoop``): a trajectory is one row, its turns
  concatenated, the tool's tokens out of the response mask. Rows are rollouts: groups of
  4, the prompt's ``uid``.
- B: ``tool_agent_turns`` (``verlcpu.tools.TurnSplitAgentLoop``): one output per assistant
  turn, verl's V1 multi-output path; verl's ``compute_advantage_for_multi_trajectories``
  counts each trajectory once for its own ``grpo`` only. Ours count it once too: one
  reward per trajectory (its final output's), its advantage on every output.

~1-1.5 min each on 2 cores.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Before test_loop's import: without verl it skips as it is imported.
pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from .test_loop import LOOP_MARKS, Run, run_example

pytestmark = LOOP_MARKS

TURNS = 3


def multi_turn_overrides(loop: str) -> list[str]:
    """The harness's multi-turn overrides (``verlcpu.multi_turn_overrides``). Its package
    module is loaded from its file: it imports nothing (``verlcpu.platform`` would patch
    torch), and the harness stays off this process's path."""
    path = Path(__file__).parent / "cpu_loop" / "verlcpu" / "__init__.py"
    spec = importlib.util.spec_from_file_location("verlcpu_settings", path)
    assert spec is not None
    assert spec.loader is not None
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    overrides: list[str] = harness.multi_turn_overrides(loop, assistant_turns=TURNS)
    return overrides


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("verl_multi_turn_loop")


def run_multi_turn(base: Path, name: str, loop: str) -> Run:
    return run_example(
        base,
        name,
        *multi_turn_overrides(loop),
        "trainer.save_freq=-1",
        RUN_NAME=f"tiny-qwen3_{name}",
        TOTAL_STEPS="1",
        MAX_RESPONSE="64",
        VERLCPU_TURN_TOKENS="8",
    )


@pytest.fixture(scope="module")
def run_a(base: Path) -> Run:
    """verl's tool_agent loop, reward_budget, one step."""
    return run_multi_turn(base, "a", "tool_agent")


@pytest.fixture(scope="module")
def run_b(base: Path) -> Run:
    """The harness's tool_agent_turns loop (one output per turn), reward_budget, one step."""
    return run_multi_turn(base, "b", "tool_agent_turns")


def the_call(run: Run) -> dict[str, Any]:
    """The run's one estimator call (one step), checked to be reward_budget's."""
    run.check()
    assert [call["estimator"] for call in run.probe] == ["reward_budget"], run.tail()
    return run.probe[0]


def row_advantages(call: dict[str, Any]) -> np.ndarray:
    """Each row's advantage, checked to be one value on all its response tokens (0 for a
    row without any: one of verl's padding rows)."""
    low, high = np.array(call["advantage_min"]), np.array(call["advantage_max"])
    tokens = np.array(call["tokens"])
    padding = np.array([uid.startswith("pad") for uid in call["uids"]], dtype=bool)
    assert (tokens[~padding] > 0).all(), call["tokens"]
    np.testing.assert_array_equal(low[tokens > 0], high[tokens > 0])  # one value per row
    return np.where(tokens > 0, low, 0.0)


def sessions(keys: list[str]) -> tuple[list[str], np.ndarray]:
    """The test's own reading of verl's keys ``{uid}_{session_id}_{index}``: each row's
    trajectory (``{uid}_{session_id}``) and whether it is its trajectory's final output
    (the highest index, as verl's grpo path reads it)."""
    parts = [key.rsplit("_", 2) for key in keys]
    trajectory = [f"{uid}_{session}" for uid, session, _ in parts]
    index = np.array([int(i) for _, _, i in parts])
    last: dict[str, int] = {}
    for t, i in zip(trajectory, index, strict=True):
        last[t] = max(last.get(t, -1), int(i))
    final = np.array([i == last[t] for t, i in zip(trajectory, index, strict=True)])
    return trajectory, final


def logged_metrics(run: Run) -> dict[str, float]:
    (metrics,) = run.steps.values()
    return {key: value for key, value in metrics.items() if key.startswith("advbudget/")}


def assert_metrics_equal(logged: dict[str, float], expected: dict[str, float]) -> None:
    for key, value in expected.items():
        if np.isnan(value):
            assert key not in logged, key
        else:
            assert logged[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_a_tool_agent_rows_are_trajectories_grouped_by_prompt(run_a: Run) -> None:
    from advbudget import compute_advantages
    from advbudget.metrics import advantage_metric_dict

    call = the_call(run_a)
    uids, rewards = call["uids"], np.array(call["rewards"])
    assert sorted(Counter(uids).values()) == [4, 4, 4, 4], uids  # the prompt's 4 rollouts
    assert all(turns > 1 for turns in call["turns"]), call["turns"]  # tool calls ran
    keys = call["batch_keys"]  # one output per session: the index is always 0
    assert keys is not None, "not under verl's V1 advantage step"
    assert all(key.endswith("_0") for key in keys), keys
    assert [key.rsplit("_", 2)[0] for key in keys] == uids
    advantages = row_advantages(call)
    core = compute_advantages(rewards, "budget", group_ids=uids)
    np.testing.assert_allclose(advantages, core.advantages, rtol=0, atol=1e-6)
    assert np.abs(advantages).max() > 0.1, "every group skipped: nothing compared"
    assert_metrics_equal(logged_metrics(run_a), advantage_metric_dict(core))


def test_b_split_outputs_carry_their_trajectorys_advantage(run_b: Run) -> None:
    """Every output of a trajectory carries the advantage of the trajectory-level call
    (one reward per trajectory, its final output's, grouped by prompt); scored as rows
    (what verl hands every estimator but its grpo), they would not."""
    from advbudget import compute_advantages
    from advbudget.metrics import advantage_metric_dict

    call = the_call(run_b)
    keys, uids, rewards = call["batch_keys"], call["uids"], np.array(call["rewards"])
    assert keys is not None, "not under verl's V1 advantage step"
    assert len(keys) == len(uids)
    trajectory, final = sessions(keys)
    outputs = Counter(trajectory)
    real = [t for t in outputs if not t.startswith("pad")]  # verl's padding rows aside
    assert len(real) == 16, outputs
    assert all(outputs[t] > 1 for t in real), outputs  # 3 measured: one per turn
    assert all(turns == 1 for turns in call["turns"]), call["turns"]  # one turn an output

    order = list(dict.fromkeys(trajectory))
    final_row = {t: row for row, t in enumerate(trajectory) if final[row]}
    prompt = {t: uids[row] for row, t in enumerate(trajectory)}
    single = compute_advantages(
        rewards[[final_row[t] for t in order]], "budget", group_ids=[prompt[t] for t in order]
    )
    assert sorted(Counter(prompt[t] for t in real).values()) == [4, 4, 4, 4]
    expected = np.asarray(single.advantages)[[order.index(t) for t in trajectory]]
    advantages = row_advantages(call)
    np.testing.assert_allclose(advantages, expected, rtol=0, atol=1e-6)
    assert np.abs(advantages).max() > 0.1, "every group skipped: nothing compared"

    rows = compute_advantages(rewards, "budget", group_ids=uids)  # each output a rollout
    gap = float(np.abs(np.asarray(rows.advantages) - advantages).max())
    assert gap > 0.1, gap  # measured: |A| 0.083 as rows, 0.25 as trajectories
    logged = logged_metrics(run_b)
    assert_metrics_equal(logged, advantage_metric_dict(single))
    assert logged["advbudget/kappa_eff/count"] > 0
    # verl's reward step keeps an `acc` per output: the outcome metric, per trajectory too
    assert "advbudget/outcome_disagreement_group_fraction" in logged
