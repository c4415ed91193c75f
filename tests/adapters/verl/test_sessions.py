"""verl's multi-output sessions (several rows a rollout, keyed ``{uid}_{session_id}_{index}``)
counted once, through verl's own ``compute_advantage_for_multi_trajectories`` on real
``DataProto`` batches; the keys -> trajectory translation and its errors."""

from __future__ import annotations

import copy
import types
import warnings

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")  # verl's V1 utils import its replay buffer

import torch

with warnings.catch_warnings():  # verl's imports warn (ray, optional engines)
    warnings.simplefilter("ignore")
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

import advbudget.adapters.verl as adapter
from advbudget import compute_advantages
from advbudget.adapters._features import Step
from advbudget.adapters._options import AdapterOptions
from advbudget.adapters.verl._convention import VERL
from advbudget.adapters.verl._metrics import batch_result
from advbudget.adapters.verl._sessions import read_keys
from advbudget.adapters.verl._trainer import _per_trajectory, trajectory_rows
from advbudget.adapters.verl.testing import algorithm_config, make_sessions
from advbudget.core import get_spec
from advbudget.metrics import advantage_metric_dict, advantage_metrics

from .conftest import VERL_WARNINGS

pytestmark = VERL_WARNINGS

# 4 prompts x 4 sessions of 1 to 4 outputs each (every group of 4 trajectories).
OUTPUTS = [[3, 1, 2, 4], [2, 2, 2, 2], [1, 1, 1, 1], [4, 1, 3, 2]]
SEED = 0  # every estimator scores some group (grpo_passk: a group with one success)


def multi(data: DataProto, keys: list[str], estimator: str, config: object = None) -> DataProto:
    """verl's V1 advantage step on a copy of ``data``."""
    config = config or algorithm_config(estimator)
    return compute_advantage_for_multi_trajectories(
        copy.deepcopy(data),
        batch_keys=keys,
        adv_estimator=estimator,
        norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo,  # type: ignore[attr-defined]
        config=config,
    )


def row_values(out: DataProto) -> torch.Tensor:
    """Each row's advantage, checked to be one value on its response tokens (0 elsewhere)."""
    advantages, mask = out.batch["advantages"], out.batch["response_mask"].bool()
    first = advantages[torch.arange(len(out)), mask.int().argmax(-1)]
    torch.testing.assert_close(advantages, first[:, None] * mask, rtol=0, atol=0)
    return first


COMPONENTS = ("accuracy", "format")  # advbudget_gdpo's reward components


def config_of(estimator: str) -> object:
    """verl's ``config.algorithm`` for ``estimator``; gdpo's names its components, passk's
    k is 2 (pass@4 of groups of 4 scores nothing)."""
    from omegaconf import open_dict

    core = VERL.core_name(estimator)
    config = algorithm_config(estimator, **({"k": 2} if core == "passk" else {}))
    if get_spec(VERL.core_name(estimator)).components:
        with open_dict(config):
            config.gdpo_reward_keys = list(COMPONENTS)
    return config


def with_components(data: DataProto, seed: int) -> DataProto:
    """``data`` with 0/1 reward components per row in ``non_tensor_batch`` (where verl's
    reward loop puts a score dict's keys), each output its own."""
    rng = np.random.default_rng(seed)
    for key in COMPONENTS:
        data.non_tensor_batch[key] = rng.integers(0, 2, len(data)).astype(np.float64)
    return data


def trajectory_batch(data: DataProto, keys: list[str]) -> tuple[DataProto, list[int]]:
    """One row per session, as if the agent loop had returned one output: its final
    output's reward (and reward components), a response as long as all its outputs'
    together, its uid; and the trajectory of each row of ``data``."""
    sessions = read_keys(keys, data.non_tensor_batch["uid"])
    order = list(dict.fromkeys(sessions.trajectory_ids))
    lengths = data.batch["response_mask"].sum(-1)
    rewards = data.batch["token_level_rewards"].sum(-1)
    width = int(max(lengths[[t == s for t in sessions.trajectory_ids]].sum() for s in order))
    tokens = torch.zeros(len(order), width)
    mask = torch.zeros(len(order), width, dtype=torch.int64)
    finals = []
    for row, session in enumerate(order):
        rows = [i for i, t in enumerate(sessions.trajectory_ids) if t == session]
        final = next(i for i in rows if sessions.final[i])
        length = int(lengths[rows].sum())
        mask[row, :length] = 1
        tokens[row, length - 1] = rewards[final]
        finals.append(final)
    trajectory = DataProto.from_dict(
        tensors={"token_level_rewards": tokens, "response_mask": mask},
        non_tensors={key: value[finals] for key, value in data.non_tensor_batch.items()},
    )
    return trajectory, [order.index(t) for t in sessions.trajectory_ids]


def session_estimators() -> list[str]:
    """Our verl names whose advantage is one value per response from the rewards alone
    (not the per-token remax and reinforce, nor those that need more than verl's batch:
    a prompt's memory, gigpo's anchors)."""
    names = []
    for name in adapter.estimator_names():
        spec = get_spec(VERL.core_name(name))
        per_token = VERL.core_name(name) in ("reinforce", "remax")
        if per_token or spec.tracker is not None or spec.turns:
            continue
        names.append(name)
    return names


@pytest.mark.parametrize("estimator", session_estimators())
def test_each_session_counts_once_for_every_estimator_of_ours(estimator: str) -> None:
    """Under verl's step, every output carries the advantage its session gets as one row
    (verl's own compute_advantage on one row per session: the final output's reward, the
    session's response lengths summed): verl's grpo scheme, for every estimator."""
    data, keys = make_sessions(OUTPUTS, seed=SEED, copied=False)
    config = config_of(estimator)
    if get_spec(VERL.core_name(estimator)).components:
        data = with_components(data, SEED)
    got = row_values(multi(data, keys, estimator, config))
    trajectories, index = trajectory_batch(data, keys)
    expected = row_values(compute_advantage(trajectories, adv_estimator=estimator, config=config))
    torch.testing.assert_close(got, expected[index], rtol=1e-6, atol=1e-6)
    assert got.abs().max() > 0.1  # something was scored


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_our_grpo_is_verls_grpo_in_the_multi_output_step(norm: bool, seed: int) -> None:
    """verl's own grpo counts each session once there: our mirror gives its numbers."""
    data, keys = make_sessions(OUTPUTS, seed=seed, copied=seed != 0)
    config = algorithm_config("grpo", norm_adv_by_std_in_grpo=norm)
    theirs = multi(data, keys, "grpo", config)
    ours = multi(data, keys, "advbudget_grpo", config)
    torch.testing.assert_close(ours.batch["advantages"], theirs.batch["advantages"])
    torch.testing.assert_close(ours.batch["returns"], theirs.batch["returns"])


def test_reward_budget_spends_each_prompts_budget_over_its_trajectories() -> None:
    """Budget 1 over a prompt's 4 trajectories: k solved get 1/k - 1/4 each, whatever
    their number of outputs; the rows as rollouts would split it over 8 to 13 rows."""
    data, keys = make_sessions(OUTPUTS, seed=3, copied=False)
    got = row_values(multi(data, keys, "reward_budget")).double()
    sessions = read_keys(keys, data.non_tensor_batch["uid"])
    order = list(dict.fromkeys(sessions.trajectory_ids))
    rewards = data.batch["token_level_rewards"].sum(-1).double()
    final = {t: rewards[i] for i, t in enumerate(sessions.trajectory_ids) if sessions.final[i]}
    prompts = [t.rsplit("_", 1)[0] for t in order]
    single = compute_advantages(torch.stack([final[t] for t in order]), "budget", group_ids=prompts)
    expected = single.advantages[[order.index(t) for t in sessions.trajectory_ids]]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-7)
    rows = compute_advantages(rewards, "budget", group_ids=list(data.non_tensor_batch["uid"]))
    assert (rows.advantages - got).abs().max() > 0.1  # what verl's step hands it otherwise


def test_one_output_per_session_and_outside_the_step_nothing_changes() -> None:
    """One output a session (verl's own loops): the step's advantages are the rows'; a
    direct compute_advantage (the legacy trainer) scores the rows, split or not."""
    single, keys = make_sessions([[1] * 4] * 3, seed=4)
    direct = compute_advantage(
        copy.deepcopy(single),
        adv_estimator="reward_budget",
        config=algorithm_config("reward_budget"),
    )
    step = multi(single, keys, "reward_budget")
    torch.testing.assert_close(step.batch["advantages"], direct.batch["advantages"])
    data, _ = make_sessions(OUTPUTS, seed=3)
    got = row_values(compute_advantage(copy.deepcopy(data), adv_estimator="reward_budget"))
    rewards = data.batch["token_level_rewards"].sum(-1)
    rows = compute_advantages(rewards, "budget", group_ids=list(data.non_tensor_batch["uid"]))
    torch.testing.assert_close(got, rows.advantages.float())


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (["p_0_0", "p_0"], "batch_keys: expected verl's '{uid}_{session_id}_{index}' (index an "
         "integer) for each row, got 'p_0' at row 1"),
        (["p_0_0", "p_0_last"], "got 'p_0_last' at row 1"),
        (["p_0_0", "p_0_0"], "batch_keys: expected each key once, got 'p_0_0' at rows 0 and 1"),
        (["p_0_0", "q_0_1"], "batch_keys: expected row 1's key to start with its uid 'p' "
         "(non_tensor_batch['uid']; the keys in the rows' order), got 'q_0_1'"),
        (["p_0_0"], "batch_keys: expected one key per row of verl's batch (2), got 1"),
    ],
)  # fmt: skip
def test_bad_keys_raise_one_line_naming_what_was_expected(keys: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=r"^batch_keys: ") as raised:
        read_keys(keys, ["p", "p"])
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_bad_keys_stop_verls_step() -> None:
    """Keys of other rows (here: reversed) or of another batch stop the step, in one line."""
    data, keys = make_sessions(OUTPUTS, seed=3)
    with pytest.raises(ValueError, match=r"^batch_keys: expected row \d+'s key to start with"):
        multi(data, keys[::-1], "reward_budget")
    with pytest.raises(
        ValueError, match=r"^batch_keys: expected one key per row .* \(32\), got 31"
    ):
        multi(data, keys[:-1], "reward_budget")


def test_keys_read_like_verls_grpo_path() -> None:
    """Split from the right (a uid may hold '_'); the highest index is the final output,
    whatever the rows' order."""
    sessions = read_keys(["a_b_1_2", "a_b_1_0", "a_b_0_0", "a_b_1_1"])
    assert sessions.trajectory_ids == ["a_b_1", "a_b_1", "a_b_0", "a_b_1"]
    assert sessions.final.tolist() == [True, False, True, False]
    assert sessions.split
    assert not read_keys(["a_0_0", "a_1_0"]).split


def test_metrics_count_sessions() -> None:
    """The trainer's metrics (recomputed from the batch with its keys) are those of the
    trajectory-level call, the outcome of each trajectory its final output's."""
    data, keys = make_sessions(OUTPUTS, seed=3, copied=False)
    config = algorithm_config("reward_budget")
    result = batch_result(data, config, sessions=read_keys(keys))
    trajectories, index = trajectory_batch(data, keys)
    single = batch_result(trajectories, config)
    expected = advantage_metric_dict(single)
    assert advantage_metric_dict(result) == pytest.approx(expected, nan_ok=True)
    assert batch_result(data, config).num_groups == 4  # rows as rollouts: also 4 groups
    rows = advantage_metric_dict(batch_result(data, config))
    assert rows["advbudget/advantage_max"] != expected["advbudget/advantage_max"]

    rewards = data.batch["token_level_rewards"].sum(-1).numpy()
    batch = types.SimpleNamespace(keys=keys, tags=[{}] * len(keys))
    step = Step(result, AdapterOptions("verl"), outcome=rewards)
    counted = _per_trajectory(step, batch)
    assert counted.result is result.trajectories.result
    finals = np.flatnonzero(read_keys(keys).final)
    outcome = np.empty(len(finals))
    outcome[np.asarray(index)[finals]] = rewards[finals]
    np.testing.assert_array_equal(counted.outcome, outcome)
    assert (
        advantage_metrics(counted.result, outcome_rewards=counted.outcome)[
            "outcome_disagreement_group_fraction"
        ]
        == 0.0
    )


def test_kappa_pairs_are_sessions_on_their_final_outputs() -> None:
    data, keys = make_sessions(OUTPUTS, seed=3)
    rows = trajectory_rows(keys, data.non_tensor_batch["uid"])
    assert len(rows) == 16
    assert all(read_keys(keys).final[rows])
    single, keys = make_sessions([[1] * 4] * 2, seed=4)
    assert trajectory_rows(keys, single.non_tensor_batch["uid"]) == list(range(8))


def test_resample_skips_by_sessions() -> None:
    """``resample``'s skip rule counts sessions as the estimator does: a prompt whose two
    sessions both end solved (one after an unsolved first output) is a tie."""
    from advbudget.adapters.verl._resample import skipped_uids

    keys, uids = ["a_0_0", "a_0_1", "a_1_0", "b_0_0", "b_1_0"], ["a", "a", "a", "b", "b"]
    rewards = [0.0, 1.0, 1.0, 0.0, 1.0]
    assert skipped_uids(rewards, uids, "reward_budget", None, keys) == {"a"}
    assert skipped_uids(rewards, uids, "reward_budget", None) == set()  # rows as rollouts
