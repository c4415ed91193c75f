"""TRL configs for tests and benchmarks of the TRL adapter: one tiny CPU run (the tiny local
Qwen3 of :func:`advbudget.lab.tiny.build_tiny_model`, 16-token completions in groups of 4).

TRL is imported only when a function runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["grpo_config", "rloo_config", "tiny_settings"]


def tiny_settings(output_dir: str | Path, /, **overrides: Any) -> dict[str, Any]:
    """The keyword arguments of a tiny CPU ``GRPOConfig``/``RLOOConfig``: 2 steps of 8
    completions (2 prompts x 4 generations) of 16 tokens, float32, no logging backend, no
    checkpoints, seed 0; ``overrides`` replace or add any (``output_dir`` too)."""
    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "report_to": "none",
        "max_completion_length": 16,
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "max_steps": 2,
        "save_strategy": "no",
        "seed": 0,
        "disable_tqdm": True,
    }
    settings.update(overrides)
    return settings


def grpo_config(output_dir: str | Path, /, **overrides: Any) -> Any:
    """TRL's ``GRPOConfig`` of :func:`tiny_settings` (TRL validates it)."""
    from trl import GRPOConfig

    return GRPOConfig(**tiny_settings(output_dir, **overrides))


def rloo_config(output_dir: str | Path, /, **overrides: Any) -> Any:
    """TRL's ``RLOOConfig`` of :func:`tiny_settings` (TRL validates it)."""
    from trl import RLOOConfig

    return RLOOConfig(**tiny_settings(output_dir, **overrides))
