"""The experiment's configuration and its presets (``quick``, ``default``, ``gpu``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from advbudget.checks import int_at_least
from advbudget.core import get_spec
from advbudget.core._weights import split_weighted


@dataclass(frozen=True)
class LMConfig:
    """Everything one ``advbudget experiment lm`` run depends on.

    The ``sft_*`` fields and the task and model fields define the warm start (its cache
    key, :meth:`warm_start_key`); the others only the RL runs.
    """

    # task
    digits: int = 2
    task_seed: int = 0
    validation_per_tier: int = 64
    test_per_tier: int = 256
    # model
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    # supervised warm start: stop at the first check where routine avg@8 >= target
    sft_hard_fraction: float = 0.03
    sft_learning_rate: float = 3e-3
    sft_batch_size: int = 64
    sft_max_steps: int = 4000
    sft_check_every: int = 50
    sft_target_routine: float = 0.5
    sft_seed: int = 0
    # RL
    estimators: tuple[str, ...] = ("grpo", "dr", "budget")
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    steps: int = 600
    prompts_per_step: int = 8
    group_size: int = 8
    hard_fraction: float = 0.25
    learning_rate: float = 3e-4
    loss_type: str = "dapo"
    beta: float = 0.0
    temperature: float = 1.0
    max_completion_length: int = 6
    eval_every: int = 10
    eval_samples: int = 8
    device: str = "cpu"
    workers: int = 1  # runs side by side (processes); not part of any result
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes, kept in the JSON

    def __post_init__(self) -> None:
        positive = (
            *("digits", "validation_per_tier", "test_per_tier"),
            *("hidden_size", "num_layers", "num_heads"),
            *("sft_batch_size", "sft_max_steps", "sft_check_every"),
            *("steps", "prompts_per_step", "max_completion_length"),
            *("eval_every", "eval_samples", "workers"),
        )
        for name in positive:
            int_at_least(name, getattr(self, name), 1)
        if self.group_size < 2:
            raise ValueError(f"group_size: expected an int >= 2, got {self.group_size!r}")
        for name in ("sft_hard_fraction", "hard_fraction", "sft_target_routine"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: expected a number in [0, 1], got {value!r}")
        for name in ("learning_rate", "sft_learning_rate", "temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a number > 0, got {getattr(self, name)!r}")
        if self.beta < 0:
            raise ValueError(f"beta: expected a number >= 0, got {self.beta!r}")
        if not self.estimators:
            raise ValueError("estimators: expected at least one estimator name, got none")
        for name in self.estimators:
            get_spec(split_weighted(name)[0])  # an unknown name fails here, naming the catalogue
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: expected distinct seeds, got {self.seeds!r}")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")

    def warm_start_key(self) -> str:
        """A hash of the fields the warm start depends on: its cache folder's name."""
        names = [
            f.name
            for f in fields(self)
            if f.name.startswith("sft_")
            or f.name
            in ("digits", "task_seed", "validation_per_tier", "test_per_tier", "hidden_size")
            or f.name in ("num_layers", "num_heads", "max_completion_length", "eval_samples")
        ]
        text = json.dumps({name: getattr(self, name) for name in names}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["estimators"], data["seeds"] = list(self.estimators), list(self.seeds)
        return data


# quick: the mechanics in well under 2 minutes (make test). default: the documented run,
# <= 45 minutes on 2 CPU cores. gpu: a larger model, more steps and seeds, one H200.
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "validation_per_tier": 16,
        "test_per_tier": 32,
        "hidden_size": 32,
        "sft_max_steps": 200,
        "sft_check_every": 100,
        "sft_target_routine": 0.05,
        "estimators": ("grpo", "budget"),
        "seeds": (0,),
        "steps": 4,
        "prompts_per_step": 4,
        "eval_every": 2,
    },
    "default": {},
    "gpu": {
        "validation_per_tier": 128,
        "test_per_tier": 512,
        "hidden_size": 128,
        "num_layers": 4,
        "estimators": ("grpo", "dr", "budget", "rloo"),
        "seeds": tuple(range(8)),
        "steps": 400,
        "prompts_per_step": 16,
        "device": "cuda",
        "workers": 8,
    },
}


def lm_config(preset: str = "default", **overrides: Any) -> LMConfig:
    """The configuration of ``preset`` with ``overrides`` (any :class:`LMConfig` field).

    Examples:
        >>> from advbudget.lab.lm import lm_config
        >>> config = lm_config("quick", seeds=(0, 1))
        >>> config.seeds, config.group_size
        ((0, 1), 8)
    """
    if preset not in PRESETS:
        raise ValueError(f"preset: expected one of {tuple(PRESETS)}, got {preset!r}")
    known = {f.name for f in fields(LMConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"overrides: expected fields of LMConfig, got {unknown}")
    return replace(LMConfig(), **{**PRESETS[preset], **overrides})
