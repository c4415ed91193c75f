"""``--advbudget.skipped_groups resample``: OpenRLHF's dynamic filtering with the
estimator's skip rule.

OpenRLHF's own ``SamplesGenerator`` (patched ``_generate_vllm``, its
``_dispatch_prompts_to_vllm`` and ``_process_response_into_experience``) under a local Ray;
the vLLM engine is a stand-in whose ``generate_responses`` returns fixed rewards per prompt
through Ray's object store, as OpenRLHF's rollout actors do.
"""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("ray")

import ray
import torch

from advbudget import compute_advantages
from advbudget.adapters.openrlhf._resample import ROUNDS_METRIC, group_kept, rounds_status

from .conftest import OPENRLHF_WARNINGS, import_openrlhf

pytestmark = OPENRLHF_WARNINGS

N = 4
NEAR = 0.3 + 1e-5  # apart in float32 (OpenRLHF's reward dtype)
#: prompt -> its samples' rewards, in the dataloader's order.
TABLE = {
    "p0": [0.0, 1.0, 0.0, 1.0],  # kept
    "p1": [1.0, 1.0, 1.0, 1.0],  # tied: skipped (OpenRLHF's (0, 1) rule too)
    "p2": [0.5, 0.5, 0.5, 0.5],  # graded tie: skipped (OpenRLHF's mean rule keeps it)
    "p3": [0.2, 0.4, 0.2, 0.2],  # graded, kept
    "p4": [0.3, NEAR, 0.3, 0.3],  # tied within tie_atol 1e-4: skipped (OpenRLHF keeps)
    "p5": [math.nan, 0.0, 0.0, 0.0],  # NaN left out, the rest tied: skipped
    "p6": [0.0, 0.0, 1.0, 0.0],  # kept
    "p7": [1.0, 0.0, 0.0, 0.0],  # kept
}
KEPT = ["p0", "p3", "p6", "p7"]


class _Remote:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return ray.put(self.fn(*args, **kwargs))


class Engine:
    """What ``SamplesGenerator`` calls on a rollout actor: a prompt's ``num_samples``
    responses in OpenRLHF's response format, rewards and scores from :data:`TABLE`."""

    def __init__(self) -> None:
        self.get_num_unfinished_requests = _Remote(lambda: 0)
        self.generate_responses = _Remote(self._generate)

    def _generate(self, prompt: str, label: str, num_samples: int, **kwargs: Any) -> Any:
        rewards = TABLE[prompt]
        assert num_samples == len(rewards)
        return [
            {
                "observation_tokens": [5, 6, 7, 8, 9],
                "action_ranges": [(2, 5)],
                "reward": reward,
                "scores": reward,
                "rollout_log_probs": None,
                "prompt": prompt,
                "label": label,
            }
            for reward in rewards
        ]


def make_args(mode: str = "resample", rounds: int = 10) -> SimpleNamespace:
    return SimpleNamespace(
        advbudget=SimpleNamespace(
            skipped_groups=mode, max_generation_batches=rounds, tie_atol=1e-4, nan_policy="omit"
        ),
        algo=SimpleNamespace(
            advantage=SimpleNamespace(estimator="reward_budget", is_correction_level="off"),
            dynamic_filtering_enable=True,
            dynamic_filtering_range=(0.0, 1.0),
        ),
        rollout=SimpleNamespace(n_samples_per_prompt=N),
        vllm=SimpleNamespace(enable_sleep=False),
    )


def generator(args: SimpleNamespace) -> Any:
    import_openrlhf()
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    gen = object.__new__(SamplesGenerator)
    gen.strategy = SimpleNamespace(args=args)
    gen.args = args
    gen.tokenizer = None
    gen.vllm_engines = [Engine()]
    return gen


def loader(prompts: list[str]) -> Any:
    """OpenRLHF's prompt dataloader items: (index, prompts, labels, images)."""
    return iter([(i, [p], [f"label-{p}"], [None]) for i, p in enumerate(prompts)])


def run(args: SimpleNamespace, prompts: list[str], num_prompts: int) -> tuple[Any, list[str]]:
    gen = generator(args)
    kept, sent, exhausted = gen._generate_vllm(
        loader(prompts), num_prompts, dynamic_filtering=True, max_new_tokens=8, max_len=64
    )
    groups = sorted({e.prompts[0] for e in kept})
    assert len(kept) == N * len(groups)  # whole groups only
    return (gen, sent, exhausted), groups


def core_kept(prompts: list[str]) -> list[str]:
    rewards = torch.tensor([TABLE[p] for p in prompts], dtype=torch.float32).reshape(-1)
    result = compute_advantages(
        rewards, "reward_budget", group_size=N, tie_atol=1e-4, nan_policy="omit"
    )
    return [
        p for p, skipped in zip(prompts, result.group_skipped.tolist(), strict=True) if not skipped
    ]


def test_the_filter_keeps_exactly_the_groups_the_core_keeps(local_ray: None) -> None:
    prompts = list(TABLE)
    assert core_kept(prompts) == KEPT
    (gen, sent, exhausted), groups = run(make_args(), prompts, num_prompts=len(prompts))
    assert groups == KEPT
    assert sent == len(prompts)  # the dataloader is empty: no replacement
    assert exhausted
    assert rounds_status(SimpleNamespace(samples_generator=gen)) == {ROUNDS_METRIC: 1.0}


def test_openrlhf_own_filter_is_not_the_skip_rule(local_ray: None) -> None:
    """keep (or no advbudget flags) with --algo.dynamic_filtering_enable: OpenRLHF's
    mean-in-range rule runs, unpatched: it keeps the graded and near ties."""
    _, groups = run(make_args(mode="keep"), list(TABLE), num_prompts=len(TABLE))
    assert groups == ["p0", "p2", "p3", "p4", "p6", "p7"]


def test_skipped_prompts_are_replaced_until_the_step_is_full(local_ray: None) -> None:
    (gen, sent, _), groups = run(make_args(), list(TABLE), num_prompts=3)
    # p0, p1, p2 sent; p1, p2, p4, p5 skipped and replaced by p3, p4, p5, p6 in turn.
    assert groups == ["p0", "p3", "p6"]
    assert sent == 7
    assert rounds_status(SimpleNamespace(samples_generator=gen)) == {ROUNDS_METRIC: 7 / 3}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_max_generation_batches_bounds_the_rounds(local_ray: None) -> None:
    logger = logging.getLogger("advbudget.adapters.openrlhf")
    handler = _Lines()
    logger.addHandler(handler)
    try:
        (gen, sent, exhausted), groups = run(make_args(rounds=2), list(TABLE), num_prompts=3)
    finally:
        logger.removeHandler(handler)
    assert sent == 6  # 2 generation batches of 3 prompts
    assert groups == ["p0", "p3"]
    assert not exhausted
    assert rounds_status(SimpleNamespace(samples_generator=gen)) == {ROUNDS_METRIC: 2.0}
    assert handler.lines == [
        "advbudget: resample: 2 of 3 groups kept after 6 prompts (2.00 generation batches; "
        "--advbudget.max_generation_batches 2 reached): training on 2 groups"
    ]


def test_group_kept_follows_the_estimator_options() -> None:
    """The decision is the core's on the same rewards, options included."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    import_openrlhf()

    def group(rewards: list[float]) -> list[Any]:
        return [
            Experience(rewards=torch.tensor([r]), action_mask=torch.ones(1, 3, dtype=torch.bool))
            for r in rewards
        ]

    near = group(TABLE["p4"])
    assert not group_kept(near, make_args())
    exact = make_args()
    exact.advbudget.tie_atol = None  # reward_budget's default, 1e-6: not a tie
    assert group_kept(near, exact)
    assert not group_kept(group([0.5] * 4), make_args())
    assert group_kept(group([0.0, 0.25, 0.0, 0.0]), make_args())
    raising = make_args()
    raising.advbudget.nan_policy = None  # the default, raise: the advantage step would too
    with pytest.raises(ValueError, match="NaN"):
        group_kept(group(TABLE["p5"]), raising)
