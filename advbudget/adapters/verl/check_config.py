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
    from advbudget.adapters.verl._metrics import solved_reward
    from advbudget.adapters.verl._skipped import check_options

    adapter.register_estimators()
    solved_reward(config.algorithm)  # +algorithm.advbudget.solved_reward: a number or null
    mode = config.trainer.v1.trainer_mode if config.trainer.get("use_v1", False) else None
    check_options(config, trainer_mode=mode)  # skipped_groups, max_generation_batches
    # First: verl takes an unknown estimator for one that needs a critic and fails later
    # on the critic's model path, far from the cause.
    estimator = config.algorithm.adv_estimator
    if estimator not in ("gae", "grpo"):
        core_algos.get_adv_estimator_fn(estimator)  # ValueError naming it when unknown
    with warnings.catch_warnings():
        # verl's note that GRPO-like estimators run without a critic: true, and expected.
        warnings.filterwarnings("ignore", message="Disabled critic")
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


def concerns(config: Any) -> list[str]:
    """What is valid to verl but would waste a run: one line each, naming the setting.

    Example:
        >>> config = compose_config(
        ...     ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1",
        ...      "data.train_files=/nonexistent/train.parquet", "data.val_files=[]"]
        ... )
        >>> for line in concerns(config):
        ...     print(line.split(":")[0])
        actor_rollout_ref.rollout.n=1
        data.train_files
    """
    found = []
    estimator = config.algorithm.adv_estimator
    group_size = config.actor_rollout_ref.rollout.n
    if estimator != "gae" and group_size < 2:
        found.append(
            f"actor_rollout_ref.rollout.n={group_size}: {estimator} compares the rollouts of "
            "a prompt, and a group of one has nothing to compare: every group is skipped and "
            "the policy gets no update (the paper samples 8 per prompt)"
        )
    for key in ("train_files", "val_files"):
        files = config.data[key]
        for name in [files] if isinstance(files, str) else list(files):
            if not Path(name).expanduser().exists():
                found.append(
                    f"data.{key}: {name} does not exist here yet (advbudget data prepare writes it)"
                )
    return found


def summary(config: Any) -> str:
    """The settings a run is told apart by, on one line.

    Example:
        >>> line = summary(compose_config(["algorithm.adv_estimator=reward_budget"]))
        >>> for setting in line.split():
        ...     print(setting)
        estimator=reward_budget
        policy_loss=vanilla
        loss_agg_mode=token-mean
        model=...
        rollout.n=1
        train_batch_size=1024
        total_epochs=30
    """
    actor = config.actor_rollout_ref.actor
    steps = config.trainer.total_training_steps
    return (
        f"estimator={config.algorithm.adv_estimator} "
        f"policy_loss={actor.policy_loss.loss_mode} loss_agg_mode={actor.loss_agg_mode} "
        f"model={config.actor_rollout_ref.model.path} "
        f"rollout.n={config.actor_rollout_ref.rollout.n} "
        f"train_batch_size={config.data.train_batch_size} "
        + (
            f"total_training_steps={steps}"
            if steps
            else f"total_epochs={config.trainer.total_epochs}"
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Compose and validate; print the settings and ``ok`` (exit 0) or the problem (exit 1).

    Settings verl accepts but that would waste a run (a group of one rollout, data files
    that are not there) are printed as warnings on stderr; they do not fail the check, since
    a dry run on a laptop rarely has the cluster's data.
    """
    overrides = list(sys.argv[1:] if argv is None else argv)
    try:
        config = compose_config(overrides)
        validate(config)
    except Exception as error:
        print(f"invalid verl config: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    for concern in concerns(config):
        print(f"warning: {concern}", file=sys.stderr)
    print(f"validated: {summary(config)}")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
