"""Parity with verl's own GRPO, and the budget estimator against the core, on real batches."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

verl = pytest.importorskip("verl")

import torch  # noqa: E402

with warnings.catch_warnings():  # verl's imports warn (ray, optional engines)
    warnings.simplefilter("ignore")
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import compute_advantage

import advbudget.adapters.verl as adapter  # noqa: E402
from advbudget import compute_advantages, token_advantages  # noqa: E402
from advbudget.adapters.verl.testing import algorithm_config, make_batch  # noqa: E402

from .conftest import VERL_WARNINGS  # noqa: E402

pytestmark = VERL_WARNINGS

# Group sizes with groups of one, of two and of eight, in one batch.
SIZES = [8, 8, 1, 3, 8, 2, 1, 5, 8, 8, 4, 1]


def run(estimator: str, batch, config):  # type: ignore[no-untyped-def]
    out = compute_advantage(
        _copy(batch),
        adv_estimator=estimator,
        norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo,
        config=config,
    )
    return out.batch["advantages"], out.batch["returns"]


def _copy(batch):  # type: ignore[no-untyped-def]
    from verl import DataProto

    return DataProto.from_dict(
        tensors={k: v.clone() for k, v in batch.batch.items()},
        non_tensors={k: v.copy() for k, v in batch.non_tensor_batch.items()},
    )


def test_registered() -> None:
    names = adapter.estimator_names()
    assert {"reward_budget", "advbudget_budget", "advbudget_grpo", "advbudget_dr_grpo"} <= set(
        names
    )
    for name in names:
        assert core_algos.get_adv_estimator_fn(name) is adapter.estimator_function(name)


# Dr.GRPO is verl's grpo with norm_adv_by_std_in_grpo=False.
@pytest.mark.parametrize(
    ("ours", "norm"), [("advbudget_grpo", True), ("advbudget_grpo", False), ("advbudget_dr", False)]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_parity_with_verl_grpo(norm: bool, ours: str, seed: int) -> None:
    batch = make_batch(SIZES, seed=seed, constant_groups=3, empty_rows=4)
    config = algorithm_config("grpo", norm_adv_by_std_in_grpo=norm)
    expected, expected_returns = run("grpo", batch, config)
    got, returns = run(ours, batch, config)
    assert got.dtype == expected.dtype == torch.float32
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(returns, expected_returns, rtol=1e-6, atol=1e-6)


def test_parity_graded_rewards() -> None:
    batch = make_batch(SIZES, seed=5, binary=False, empty_rows=2)
    config = algorithm_config("grpo")
    expected, _ = run("grpo", batch, config)
    got, _ = run("advbudget_grpo", batch, config)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_verl_conventions_hold_in_the_batch() -> None:
    """The cases the parity covers really occur: singletons, constant groups, empty rows."""
    batch = make_batch(SIZES, seed=0, constant_groups=3, empty_rows=4)
    got, _ = run("advbudget_grpo", batch, algorithm_config("grpo"))
    mask = batch.batch["response_mask"]
    scores = batch.batch["token_level_rewards"].sum(-1)
    uids = batch.non_tensor_batch["uid"]
    singles = [i for i, u in enumerate(uids) if (uids == u).sum() == 1]
    for i in singles:  # a group of one keeps its raw reward (mean 0, std 1)
        expected = scores[i] / (1 + 1e-6)
        assert torch.allclose(got[i], expected * mask[i])
    assert int((mask.sum(-1) == 0).sum()) == 4


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("budget", [1.0, 0.5])
def test_reward_budget_matches_core(seed: int, budget: float) -> None:
    batch = make_batch(SIZES, seed=seed, constant_groups=2, empty_rows=3, binary=seed == 0)
    config = algorithm_config("reward_budget", budget=budget)
    got, returns = run("reward_budget", batch, config)
    scores = batch.batch["token_level_rewards"].sum(-1)
    core = compute_advantages(
        scores, "budget", group_ids=list(batch.non_tensor_batch["uid"]), budget=budget
    )
    expected = token_advantages(core.advantages, batch.batch["response_mask"])
    torch.testing.assert_close(got, expected)
    assert returns is got or torch.equal(returns, got)
    # SPEC: every group sums to 0 (over all its responses, empty ones included).
    seq = core.advantages.numpy()
    uids = batch.non_tensor_batch["uid"]
    for u in set(uids):
        assert abs(seq[uids == u].sum()) < 1e-5


def test_reward_budget_binary_values() -> None:
    """k of G correct: a correct response gets B(1/k - 1/G), a wrong one -B/G."""
    batch = make_batch([8] * 4, seed=3, empty_rows=0)
    got, _ = run("reward_budget", batch, algorithm_config("reward_budget"))
    scores = batch.batch["token_level_rewards"].sum(-1).numpy()
    seq = (got.sum(-1) / batch.batch["response_mask"].sum(-1)).numpy()
    uids = batch.non_tensor_batch["uid"]
    for u in set(uids):
        k = scores[uids == u].sum()
        if 0 < k < 8:
            np.testing.assert_allclose(seq[(uids == u) & (scores == 1)], 1 / k - 1 / 8, rtol=1e-5)
            np.testing.assert_allclose(seq[(uids == u) & (scores == 0)], -1 / 8, rtol=1e-5)


def test_rloo_matches_core() -> None:
    batch = make_batch([4, 4, 3, 8], seed=4)
    got, _ = run("advbudget_rloo", batch, algorithm_config("advbudget_rloo"))
    scores = batch.batch["token_level_rewards"].sum(-1)
    core = compute_advantages(
        scores,
        "rloo",
        group_ids=batch.non_tensor_batch["uid"],
        tie_rtol=0,
        tie_atol=0,
        singletons="raw",
    )
    torch.testing.assert_close(got, token_advantages(core.advantages, batch.batch["response_mask"]))


def test_config_as_plain_dict_and_none() -> None:
    batch = make_batch([4, 4], seed=1)
    fn = adapter.estimator_function("reward_budget")
    kw = {
        "token_level_rewards": batch.batch["token_level_rewards"],
        "response_mask": batch.batch["response_mask"],
        "index": batch.non_tensor_batch["uid"],
    }
    a, _ = fn(**kw, config=None)
    b, _ = fn(**kw, config={"advbudget": {"budget": 2.0}}, reward_baselines=None)
    torch.testing.assert_close(b, 2 * a)


def test_errors_name_the_argument() -> None:
    batch = make_batch([4], seed=1)
    fn = adapter.estimator_function("advbudget_grpo")
    rewards, mask = batch.batch["token_level_rewards"], batch.batch["response_mask"]
    with pytest.raises(TypeError, match="'index'"):  # verl's grpo signature: required
        fn(token_level_rewards=rewards, response_mask=mask, config=None)
    with pytest.raises(ValueError, match=r"index: .*uid"):
        fn(rewards, mask, None)
    with pytest.raises(ValueError, match="index: expected one uid per response"):
        fn(rewards, mask, index=np.array(["a"], dtype=object), config=None)
    with pytest.raises(ValueError, match="token_level_rewards: expected shape"):
        fn(rewards.sum(-1), mask, index=batch.non_tensor_batch["uid"], config=None)


def test_register_is_idempotent_and_refuses_foreign_names() -> None:
    assert adapter.register_estimators() == adapter.estimator_names()
    saved = core_algos.ADV_ESTIMATOR_REGISTRY["reward_budget"]
    core_algos.ADV_ESTIMATOR_REGISTRY["reward_budget"] = lambda **kw: None
    try:
        with pytest.raises(ValueError, match="reward_budget"):
            adapter.register_estimators()
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY["reward_budget"] = saved


def test_config_as_verl_algo_config_dataclass() -> None:
    """verl's typed ``AlgoConfig`` (no ``advbudget`` field) works like the DictConfig."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.trainer.config import AlgoConfig

    batch = make_batch(SIZES, seed=2, constant_groups=2, empty_rows=2)
    for norm in (True, False):
        typed = AlgoConfig(adv_estimator="advbudget_grpo", norm_adv_by_std_in_grpo=norm)
        got, _ = run("advbudget_grpo", batch, typed)
        expected, _ = run("grpo", batch, algorithm_config("grpo", norm_adv_by_std_in_grpo=norm))
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
