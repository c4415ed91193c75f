"""float32 accuracy of the verl mirrors, on the inputs of verl's own equivalence tests
(``tests/trainer/ppo/test_core_algos_on_cpu.py`` of the verl wheel: its group index and
random masks, float32 token rewards on every response token).

The guarantee: each mirror takes verl's own float32 sequence reward (the same number
verl's estimator starts from) and computes every statistic after it in float64, rounded
once to float32: within one float32 rounding of the exact result of those sums. verl's
own estimators add their float32 arithmetic on top. ``pytest -s`` prints the table of the
closing note: mean and max error against the float64 result, ours and verl's.
"""

from __future__ import annotations

import functools
import importlib.util
import random
import warnings
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

verl = pytest.importorskip("verl")

import torch  # noqa: E402

with warnings.catch_warnings():  # verl's imports warn (ray, optional engines)
    warnings.simplefilter("ignore")
    from verl.trainer.ppo import core_algos

from advbudget.adapters.verl import estimator_function  # noqa: E402
from advbudget.adapters.verl._estimators import MIRRORS  # noqa: E402
from advbudget.testing import rounding_tolerance  # noqa: E402

from .conftest import VERL_WARNINGS  # noqa: E402

pytestmark = VERL_WARNINGS
SHAPES = [(64, 128, 5, 0), (128, 256, 8, 1), (512, 512, 10, 2)]  # verl's parametrisation
CONFIG = SimpleNamespace(gamma=1.0, norm_adv_by_std_in_grpo=True, get=lambda k, d=None: d)
GROUPED = ["grpo", "rloo", "opo", "gpg", "grpo_passk", "reinforce_plus_plus_baseline"]


@functools.cache
def _upstream() -> ModuleType:
    """verl's own test module, from the installed wheel (not this repository's tests),
    loaded once."""
    path = Path(verl.__file__).parents[1] / "tests/trainer/ppo/test_core_algos_on_cpu.py"
    spec = importlib.util.spec_from_file_location("verl_upstream_core_algos_test", path)
    assert spec is not None, path
    assert spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs(shape: tuple[int, int, int, int]) -> tuple[Any, Any, Any, Any]:
    batch_size, seq_len, num_groups, seed = shape
    upstream = _upstream()
    torch.manual_seed(seed)
    random.seed(seed)  # verl's group index draws from random, its masks from torch
    index = upstream._make_group_index(batch_size, num_groups)
    mask = upstream._rand_mask(batch_size, seq_len)
    rewards = torch.randn(batch_size, seq_len, dtype=torch.float32) * mask
    baselines = torch.randn(batch_size, dtype=torch.float32)
    return rewards, mask, index, baselines


def _call(core: str, fn: Any, rewards: Any, mask: Any, index: Any, baselines: Any) -> Any:
    if core == "remax":
        return fn(rewards.clone(), baselines, mask, config=CONFIG)
    if core == "reinforce":
        return fn(rewards.clone(), mask, config=CONFIG)
    return fn(rewards.clone(), mask, index, config=CONFIG)


def _errors(got: Any, exact: Any, mask: Any) -> tuple[float, float]:
    error = (got.double() - exact)[mask.bool()].abs()
    return float(error.mean()), float(error.max())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"seed{s[3]}")
@pytest.mark.parametrize("core", [*GROUPED, "reinforce", "remax"])
def test_one_rounding_after_verls_sum(core: str, shape: tuple[int, int, int, int]) -> None:
    rewards, mask, index, baselines = _inputs(shape)
    theirs_fn = getattr(core_algos, MIRRORS[core].function)
    ours = _call(core, estimator_function(f"advbudget_{core}"), rewards, mask, index, baselines)
    if core in GROUPED:  # the exact result of verl's float32 sums
        sums = torch.zeros_like(rewards, dtype=torch.float64)
        sums[:, 0] = rewards.sum(-1).double()
        reference = _call(core, theirs_fn, sums, mask.double(), index, None)
    else:  # per-token estimators: ours is float64 from the float32 token rewards
        reference = _call(core, theirs_fn, rewards.double(), mask.double(), index, baselines)
    for got, exact in zip(ours, reference, strict=True):
        assert got.dtype == torch.float32
        tolerance = rounding_tolerance(exact, terms=1, dtype=torch.float32, slack=1.0)
        assert float((got.double() - exact).abs().max()) <= tolerance, core


def test_error_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Mean and max error against float64 over the response tokens, ours and verl's
    (printed with ``-s``). The float32 sum both start from dominates both: ours is within
    10% of verl's mean error or better in every cell, and its worst element at most one
    float32 rounding of the result worse than verl's worst (single elements are where
    the shared sum's error and the last rounding meet)."""
    rows = []
    for core in [*GROUPED, "reinforce", "remax"]:
        theirs_fn = getattr(core_algos, MIRRORS[core].function)
        ours_fn = estimator_function(f"advbudget_{core}")
        for shape in SHAPES:
            rewards, mask, index, baselines = _inputs(shape)
            exact = _call(core, theirs_fn, rewards.double(), mask.double(), index, baselines)[0]
            theirs = _call(core, theirs_fn, rewards, mask, index, baselines)[0]
            ours = _call(core, ours_fn, rewards, mask, index, baselines)[0]
            mine, their = _errors(ours, exact, mask), _errors(theirs, exact, mask)
            rows.append((core, shape[3], *mine, *their))
            assert mine[0] <= 1.1 * their[0], rows[-1]
            rounding = rounding_tolerance(exact, terms=1, dtype=torch.float32, slack=1.0)
            assert mine[1] <= their[1] + rounding, rows[-1]
    with capsys.disabled():
        print("\n| mirror | seed | ours mean | ours max | verl mean | verl max |")
        print("|---|---|---|---|---|---|")
        for core, seed, *values in rows:
            print(f"| {core} | {seed} | " + " | ".join(f"{v:.2e}" for v in values) + " |")
