"""Shared pieces of the OpenRLHF adapter tests: real ``Experience`` objects and a real
``RemoteExperienceMaker`` (built without Ray: only its args and KL controller are used).

On a CPU machine ``flash_attn`` and ``vllm`` do not install; OpenRLHF's trainer modules
import them at module level, so the import stubs in ``stubs/`` go on ``sys.path`` (and on
PYTHONPATH, for subprocesses and Ray workers) when OpenRLHF is installed without them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

collect_ignore = ["stubs", "cpu_loop"]  # cpu_loop: a sitecustomize, never imported here

STUBS = Path(__file__).parent / "stubs"
if importlib.util.find_spec("openrlhf") is not None:
    for _name in ("flash_attn", "vllm"):
        if importlib.util.find_spec(_name) is None:
            # transformers and peft probe for flash_attn: import them before the stubs.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import peft  # noqa: F401
                import transformers.modeling_utils  # noqa: F401
            sys.path.insert(0, str(STUBS))
            os.environ["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(STUBS), os.environ.get("PYTHONPATH")) if p
            )
            break

# OpenRLHF, deepspeed and torch.jit warn at import and at first use; Ray leaves an unclosed
# /dev/null that the garbage collector reports at a random later test (seen once).
OPENRLHF_WARNINGS = pytest.mark.filterwarnings(
    "ignore::UserWarning",
    "ignore::DeprecationWarning",
    "ignore::FutureWarning",
    "ignore::ResourceWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
)


def import_openrlhf() -> Any:
    """The experience-maker module, imported with its import-time warnings silenced."""
    pytest.importorskip("openrlhf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import openrlhf.trainer.ppo_utils.experience_maker as module
    return module


def make_args(
    estimator: str,
    n: int,
    *,
    max_new_tokens: int = 16,
    overlong_buffer_len: float | None = None,
    overlong_penalty_factor: float = 1.0,
    stop_properly_penalty_coef: float | None = None,
    clip_range: tuple[float, float] = (-10.0, 10.0),
    gamma: float = 1.0,
) -> SimpleNamespace:
    """The parts of OpenRLHF's hierarchised args that compute_advantages_and_returns reads
    (defaults: OpenRLHF 0.11.2's parser defaults)."""
    return SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n, max_new_tokens=max_new_tokens),
        data=SimpleNamespace(max_len=None),
        algo=SimpleNamespace(
            advantage=SimpleNamespace(
                estimator=estimator, gamma=gamma, lambd=1.0, no_std_norm=False
            )
        ),
        reward=SimpleNamespace(
            clip_range=clip_range,
            overlong_buffer_len=overlong_buffer_len,
            overlong_penalty_factor=overlong_penalty_factor,
            stop_properly_penalty_coef=stop_properly_penalty_coef,
        ),
    )


def make_maker(args: SimpleNamespace, kl_coef: float = 0.0) -> Any:
    """A real ``RemoteExperienceMaker`` with no Ray actor groups (not needed here)."""
    module = import_openrlhf()
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    maker = object.__new__(module.RemoteExperienceMaker)
    maker.strategy = SimpleNamespace(args=args)
    maker.args = args
    maker.advantage_estimator = args.algo.advantage.estimator
    maker.kl_ctl = FixedKLController(kl_coef)
    return maker


def make_experiences(
    prompts: int,
    n: int,
    *,
    length: int = 16,
    micro_batch: int = 5,
    seed: int = 0,
    rewards: tuple[float, ...] = (-1.0, 0.0, 0.5, 1.0),
    constant_groups: int = 1,
) -> list[Any]:
    """Real ``Experience`` objects as OpenRLHF's experience maker leaves them before
    ``compute_advantages_and_returns``: samples shuffled across micro-batches
    (``index`` = position in the prompt-major order), left-aligned action masks of random
    lengths, each micro-batch as wide as its longest response, KL terms, truncation flags.
    Rewards come from ``rewards`` (dyadic by default, so group means are exact); the first
    ``constant_groups`` groups have one reward."""
    import torch

    module = import_openrlhf()
    from openrlhf.trainer.ppo_utils.experience import Experience

    del module
    g = torch.Generator().manual_seed(seed)
    total = prompts * n
    choice = torch.tensor(rewards)[torch.randint(len(rewards), (total,), generator=g)]
    choice[: constant_groups * n] = rewards[-1]
    lengths = torch.randint(1, length + 1, (total,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    kl = torch.randn(total, length, generator=g) * 0.05 * mask
    order = torch.randperm(total, generator=g)
    experiences = []
    for start in range(0, total, micro_batch):
        rows = order[start : start + micro_batch]
        width = int(lengths[rows].max())  # OpenRLHF pads a micro-batch to its longest
        experiences.append(
            Experience(
                rewards=choice[rows].clone(),
                action_mask=mask[rows, :width].clone(),
                kl=kl[rows, :width].clone(),
                response_length=lengths[rows].clone().float(),
                truncated=(lengths[rows] == length).clone(),
                index=rows.tolist(),
                info={"reward": choice[rows].clone()},
            )
        )
    return experiences


@pytest.fixture(scope="module")
def local_ray():  # type: ignore[no-untyped-def]
    """A local one-CPU Ray with the adapter's setup hook installed, for one test module
    (test_kappa.py keeps its own: it runs without the hook)."""
    import ray

    import advbudget.adapters.openrlhf as adapter

    if ray.is_initialized():
        pytest.skip("Ray already initialised in this process")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    adapter.install()
    yield
    adapter.uninstall()
    ray.shutdown()
