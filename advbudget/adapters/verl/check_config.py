"""Compose verl's trainer config with command-line overrides and validate it, on a CPU.

``python -m advbudget.adapters.verl.check_config [hydra overrides...]`` composes verl's own
``verl/trainer/config/ppo_trainer.yaml`` as ``python -m verl.trainer.main_ppo`` would, runs
verl's ``validate_config`` and checks that the advantage estimator and the v1 trainer mode
are registered; it prints ``ok`` and exits 0, or prints why and exits 1. No GPU, model or
data are touched. ``examples/verl_qwen3.sh --dry-run`` uses it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def compose_config(overrides: Sequence[str] = (), config_name: str = "ppo_trainer") -> Any:
    """verl's trainer config with ``overrides`` applied, through hydra's compose API."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def validate(config: Any) -> None:
    """verl's own ``validate_config``, then the registries: raises on the first problem."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.trainer.ppo import core_algos
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config

    import advbudget.adapters.verl as adapter

    adapter.register_estimators()
    # First: verl takes an unknown estimator for one that needs a critic and fails later
    # on the critic's model path, far from the cause.
    estimator = config.algorithm.adv_estimator
    if estimator not in ("gae", "grpo"):
        core_algos.get_adv_estimator_fn(estimator)  # ValueError naming it when unknown
    validate_config(
        config=config,
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )
    if config.trainer.get("use_v1", False):
        mode = config.trainer.v1.trainer_mode
        if mode.startswith("advbudget_"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                names = adapter.register_trainers()
            if mode not in names:
                raise ValueError(
                    f"trainer.v1.trainer_mode: expected one of {names} (needs TransferQueue), "
                    f"got {mode!r}"
                )


def main(argv: Sequence[str] | None = None) -> int:
    """Compose and validate; print ``ok`` (exit 0) or the problem (exit 1)."""
    overrides = list(sys.argv[1:] if argv is None else argv)
    try:
        validate(compose_config(overrides))
    except Exception as error:
        print(f"invalid verl config: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
