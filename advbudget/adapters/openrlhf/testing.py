"""OpenRLHF (0.11.2) objects for tests and benchmarks of the OpenRLHF adapter: real
``Experience`` objects as the experience maker leaves them before the advantage step, and a
real ``RemoteExperienceMaker`` built without Ray (only its args and KL controller are read).

OpenRLHF and torch are imported only when a function runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

__all__ = ["experience_maker_module", "make_args", "make_experiences", "make_maker"]

# OpenRLHF imports these at module level (models/ring_attn_utils.py, trainer/ray/vllm_engine.py,
# trainer/ppo_utils/samples_generator.py); neither installs on a CPU machine.
_GPU_ONLY = ("flash_attn", "vllm")


def experience_maker_module() -> Any:
    """``openrlhf.trainer.ppo_utils.experience_maker``, its import-time warnings silenced.

    Where ``flash_attn`` or ``vllm`` cannot be imported (a CPU machine) and nothing on
    ``sys.path`` stands in for it (the OpenRLHF tests put their stubs there), an empty
    placeholder package does, for this process: the imports succeed, and anything used
    from it raises ImportError. transformers and peft are imported first, so that their
    probes for flash_attn never see the placeholder.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import peft  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
        import transformers.modeling_utils  # noqa: F401

        missing = [name for name in _GPU_ONLY if importlib.util.find_spec(name) is None]
        if missing and not any(isinstance(f, _Placeholders) for f in sys.meta_path):
            sys.meta_path.append(_Placeholders(missing))
        import openrlhf.trainer.ppo_utils.experience_maker as module
    return module


class _Placeholders(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the packages ``names`` (and every submodule) as empty placeholders; last on
    ``sys.meta_path``, so anything installed or on ``sys.path`` comes first."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, f"placeholder: {spec.name} is not installed")
        module.__path__ = []

        def missing(attribute: str) -> Any:
            if attribute.startswith("__"):
                raise AttributeError(attribute)
            return _Missing(f"{spec.name}.{attribute}")

        module.__getattr__ = missing  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Missing:
    """A name of a placeholder package: importing it works, using it raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ImportError(f"{self._name}: not installed (a placeholder let OpenRLHF import)")

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Missing(f"{self._name}.{attribute}")


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
    advbudget: Mapping[str, Any] | None = None,
) -> SimpleNamespace:
    """The parts of OpenRLHF's hierarchised args that ``compute_advantages_and_returns``
    reads (defaults: OpenRLHF 0.11.2's parser defaults); ``advbudget``: our
    ``--advbudget.<option>`` flags (``{"skipped_groups": "drop"}``), absent when None."""
    args = SimpleNamespace(
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
    if advbudget is not None:
        args.advbudget = SimpleNamespace(**advbudget)
    return args


def make_maker(args: SimpleNamespace, kl_coef: float = 0.0) -> Any:
    """A real ``RemoteExperienceMaker`` with ``args`` and a fixed KL coefficient, and no
    Ray actor groups (the advantage step needs none)."""
    module = experience_maker_module()
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
    observation_spans: bool = False,
) -> list[Any]:
    """Real ``Experience`` objects as OpenRLHF's experience maker leaves them before
    ``compute_advantages_and_returns``: ``prompts * n`` samples shuffled across
    micro-batches of ``micro_batch`` (``index`` = position in the prompt-major order),
    left-aligned action masks of random lengths in 1..length, each micro-batch as wide as
    its longest response, KL terms, truncation flags. Rewards are drawn from ``rewards``
    (dyadic by default, so group means are exact); the first ``constant_groups`` groups
    have one reward. ``observation_spans``: multi-turn responses, as OpenRLHF's agent
    loop leaves them: a span of environment tokens (action mask 0) inside every response
    of four tokens or more."""
    import torch

    experience_maker_module()
    from openrlhf.trainer.ppo_utils.experience import Experience

    g = torch.Generator().manual_seed(seed)
    total = prompts * n
    choice = torch.tensor(rewards)[torch.randint(len(rewards), (total,), generator=g)]
    choice[: constant_groups * n] = rewards[-1]
    lengths = torch.randint(1, length + 1, (total,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    if observation_spans:
        for row in torch.nonzero(lengths >= 4).flatten().tolist():
            start = int(torch.randint(1, int(lengths[row]) - 2, (1,), generator=g))
            mask[row, start : start + 1 + row % 2] = False
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
