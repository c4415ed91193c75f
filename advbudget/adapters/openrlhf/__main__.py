"""``python -m advbudget.adapters.openrlhf <openrlhf.cli.train_ppo_ray flags>``.

Runs OpenRLHF's own ``openrlhf.cli.train_ppo_ray`` as ``__main__`` (its parser, its
checks, its trainer) with three changes:

- ``--algo.advantage.estimator`` also accepts our names (``reward_budget`` and
  ``advbudget_NAME`` for every estimator of the advbudget catalogue, plugins included);
- own flags: ``--advbudget.<option>`` for every option of the catalogue's estimators
  (``--advbudget.budget B``: reward_budget's total budget, default 1.0; ``--advbudget.eps``;
  a plugin's own; read inside the trainer as ``args.advbudget.<option>``; unset ones keep
  the estimator's default), ``--advbudget.tie_rtol`` / ``--advbudget.tie_atol``,
  ``--advbudget.kappa_every K`` (log κ_eff every K steps, one extra actor forward over 2
  samples per group; 0 turns it off; default 10), ``--advbudget.solved_reward R`` (the
  reward at which a sample counts as solved in ``advbudget/unsolved_group_fraction`` and
  ``advbudget/solved_group_fraction``; default 1.0; ``none`` turns the split off),
  ``--advbudget.skipped_groups keep|drop|resample`` (the rows of skipped groups: kept with
  advantage 0 as OpenRLHF does, dropped from the loss and its normaliser by zeroing their
  action mask, or resampled by OpenRLHF's dynamic filtering deciding with the estimator's
  skip rule; default keep), ``--advbudget.max_generation_batches N`` (resample's bound:
  at most N times the step's prompts generated per step; default 10),
  ``--advbudget.max_staleness K`` and ``--advbudget.stale_rollouts
  keep|baseline_only|drop|drop_group`` (samples generated more than K weight syncs before
  the update, in async training: the core's staleness rules; default: none is stale, the
  metrics report the lag) and ``--advbudget.parse_only`` (parse and run OpenRLHF's
  argument checks, print the estimator, stop before Ray starts; only the parser block of
  ``train_ppo_ray`` runs, so no vLLM or flash-attn is needed);
- Ray is initialised with our patch as ``worker_process_setup_hook`` (plus OpenRLHF's own
  env_vars) so that the ``PPOTrainer`` actor computes our advantages. Under ``ray job
  submit`` the job's ``--runtime-env-json`` may carry the hook too (needed when the job runs
  anything else first); fields the job sets are not set again (Ray refuses duplicates).

Our preconditions (checked before OpenRLHF's): our estimators need
``--rollout.n_samples_per_prompt > 1`` (``advbudget_reinforce`` too runs with 1, as
OpenRLHF's ``reinforce``) and no critic.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from advbudget.core import estimator_specs, get_spec
from advbudget.core.estimators.stateful import KL_RHO, is_kl_rho

from .._features import check_memory
from .._options import DEFAULT_MAX_GENERATION_BATCHES, AdapterOptions
from ._convention import OPENRLHF
from ._estimators import estimator_names, is_ours, needs_groups
from ._hooks import HOOK, install, openrlhf_parser
from ._options import key_of, read_options
from ._parse_only import ParsedOnly, run_main_block
from ._version import check_openrlhf_version

ESTIMATOR_FLAG = "--algo.advantage.estimator"
DEFAULT_KAPPA_EVERY = OPENRLHF.kappa_every
_OWN_FLAGS = (
    "kappa_every",
    "parse_only",
    "tie_rtol",
    "tie_atol",
    "nan_policy",
    "solved_reward",
    "group_weight",
    "skipped_groups",
    "max_generation_batches",
    "max_staleness",
    "stale_rollouts",
)
SKIPPED_FLAG = key_of("skipped_groups")
ROUNDS_FLAG = key_of("max_generation_batches")


def validate(flat: argparse.Namespace) -> None:
    """Our own preconditions on OpenRLHF's flat (dotted) namespace; raises ``SystemExit``.

    ``--advbudget.solved_reward`` is stored back as a float, or ``"none"`` when off."""
    every = getattr(flat, "advbudget.kappa_every", DEFAULT_KAPPA_EVERY)
    if every is not None and every < 0:
        raise SystemExit(f"advbudget: --advbudget.kappa_every must be >= 0, got {every}")
    # Our flags as the trainer will read them (args.advbudget.<name>): checked here, once,
    # before Ray starts.
    ours = {
        key.partition(".")[2]: value
        for key, value in vars(flat).items()
        if key.startswith("advbudget.")
    }
    try:
        options = read_options(SimpleNamespace(advbudget=SimpleNamespace(**ours)))
    except ValueError as error:
        raise SystemExit(f"advbudget: {error}") from None
    if ours.get("solved_reward") is not None:
        value = options.solved_reward
        setattr(flat, "advbudget.solved_reward", "none" if value is None else value)
    estimator = getattr(flat, "algo.advantage.estimator", None)
    _validate_skipped_groups(flat, options, estimator is not None and is_ours(estimator))
    if estimator is None or not is_ours(estimator):
        try:  # OpenRLHF's own estimator: refuse what only one of ours takes (rho=kl)
            check_memory(None, options, key_of)
        except ValueError as error:
            raise SystemExit(f"advbudget: {error}") from None
        return
    n = getattr(flat, "rollout.n_samples_per_prompt", 1)
    if n is None or n < 1 or (n < 2 and needs_groups(estimator)):
        raise SystemExit(
            f"advbudget: --algo.advantage.estimator {estimator} compares the samples of a "
            f"prompt: it needs --rollout.n_samples_per_prompt > 1 (got {n})"
        )
    if getattr(flat, "critic.model_name_or_path", None):
        raise SystemExit(
            f"advbudget: --algo.advantage.estimator {estimator} uses no critic; drop "
            "--critic.model_name_or_path"
        )
    spec = get_spec(OPENRLHF.core_name(estimator))
    try:
        OPENRLHF.check_rewards(spec, estimator)
    except ValueError as error:
        raise SystemExit(f"advbudget: --algo.advantage.{error}") from None
    given = {o.name: getattr(flat, f"advbudget.{o.name}", None) for o in spec.options}
    try:  # the estimator's checks across its options (rho kl is measured, not given)
        spec.resolve_options(
            {k: v for k, v in given.items() if v is not None and not is_kl_rho(k, v)}
        )
        check_memory(spec, options, key_of)
    except (TypeError, ValueError) as error:
        message = str(error)
        raise SystemExit(
            f"advbudget: {message if message.startswith('--') else '--advbudget.' + message}"
        ) from None


def _validate_skipped_groups(flat: argparse.Namespace, options: AdapterOptions, ours: bool) -> None:
    """``--advbudget.skipped_groups`` / ``--advbudget.max_generation_batches``, stored back
    parsed (``keep`` and :data:`DEFAULT_MAX_GENERATION_BATCHES` when not given).
    ``resample`` turns on OpenRLHF's dynamic filtering, whose decision our patch takes from
    the estimator's skip rule (:mod:`._resample`)."""
    mode, rounds = options.skipped_groups, options.max_generation_batches
    rounds_given = getattr(flat, "advbudget.max_generation_batches", None)
    if mode != "keep" and not ours:
        raise SystemExit(
            f"advbudget: {SKIPPED_FLAG} {mode} needs one of our estimators "
            "(--algo.advantage.estimator reward_budget or advbudget_NAME), got "
            f"{getattr(flat, 'algo.advantage.estimator', None)!r}"
        )
    if rounds_given is not None and mode != "resample":
        raise SystemExit(
            f"advbudget: {ROUNDS_FLAG} bounds the rounds of {SKIPPED_FLAG} resample, got it "
            f"with {SKIPPED_FLAG} {mode}"
        )
    setattr(flat, "advbudget.skipped_groups", mode)
    setattr(flat, "advbudget.max_generation_batches", rounds)
    if mode == "resample":
        # OpenRLHF's switch: its generator then replaces filtered prompts; our patch makes
        # the decision and bounds the rounds. Its own checks (a remote reward or an agent
        # function, n > 1) run after this.
        setattr(flat, "algo.dynamic_filtering_enable", True)


def option_flags() -> dict[str, Any]:
    """``--advbudget.<option>`` for every option of the catalogue -> the argparse type
    (from the option's default: a bool takes true/false)."""
    flags: dict[str, Any] = {}
    for name in OPENRLHF.option_names():
        if name in _OWN_FLAGS:
            raise ValueError(f"an estimator option named {name!r} clashes with --advbudget.{name}")
        defaults = [o.default for s in estimator_specs() if (o := s.option(name)) is not None]
        flags[name] = _rho if name == "rho" else _argparse_type(defaults[0])
    return flags


def _rho(text: str) -> float | str:
    """``--advbudget.rho``: a number, or ``kl`` (spo's KL-adaptive forgetting)."""
    if is_kl_rho("rho", text):
        return KL_RHO
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number in [0, 1] or {KL_RHO!r}, got {text!r}"
        ) from None


def _argparse_type(default: Any) -> Any:
    if isinstance(default, bool):
        return _boolean
    if isinstance(default, (int, float, str)):
        return type(default)
    return str


def _boolean(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _add_own_flags(parser: argparse.ArgumentParser) -> None:
    """Our ``--advbudget.*`` flags, on OpenRLHF's parser."""
    for name, kind in option_flags().items():
        parser.add_argument(f"--advbudget.{name}", type=kind, default=None)
    parser.add_argument("--advbudget.tie_rtol", type=float, default=None)
    parser.add_argument("--advbudget.tie_atol", type=float, default=None)
    parser.add_argument("--advbudget.nan_policy", choices=("raise", "omit"), default=None)
    parser.add_argument("--advbudget.kappa_every", type=int, default=DEFAULT_KAPPA_EVERY)
    parser.add_argument("--advbudget.solved_reward", type=str, default=None)
    parser.add_argument(
        "--advbudget.group_weight",
        type=str,
        default=None,
        help="a difficulty weight on the advantages: grpo_lead, dqw, or a JSON object "
        '{"name": ..., options}',
    )
    parser.add_argument(
        SKIPPED_FLAG,
        type=str,
        default=None,
        help="keep (default: advantage 0, in the normaliser, OpenRLHF's behaviour), drop "
        "(out of the loss and its normaliser) or resample (dynamic filtering with the "
        "estimator's skip rule) the rows of skipped groups",
    )
    parser.add_argument(
        ROUNDS_FLAG,
        type=str,
        default=None,
        help=f"resample: at most N times the step's prompts generated per step (default "
        f"{DEFAULT_MAX_GENERATION_BATCHES})",
    )
    parser.add_argument(
        key_of("max_staleness"),
        type=str,
        default=None,
        help="a sample generated more than K policy versions (weight syncs) before the "
        "update is stale (default: none is); async training",
    )
    parser.add_argument(
        key_of("stale_rollouts"),
        type=str,
        default=None,
        help="keep (default: metrics only), baseline_only (in the group's statistics, then "
        "advantage 0), drop (out of the group before its statistics) or drop_group",
    )
    parser.add_argument("--advbudget.parse_only", action="store_true", default=False)


def runtime_env(job_runtime_env: dict[str, Any] | None = None) -> dict[str, Any]:
    """What our ``ray.init`` adds to the runtime env: the hook and OpenRLHF's env_vars.

    Inside ``ray job submit`` the job's runtime env (``job_runtime_env``, read from
    ``RAY_JOB_CONFIG_JSON_ENV_VAR`` when None) is merged by Ray with ours, and Ray refuses
    a field or env var set in both: so whatever the job already sets is left out here.
    """
    if job_runtime_env is None:
        job_config = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
        job_runtime_env = job_config.get("runtime_env") or {}
    env_vars = {
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get(
            "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"
        ),
    }
    taken = job_runtime_env.get("env_vars") or {}
    ours: dict[str, Any] = {"env_vars": {k: v for k, v in env_vars.items() if k not in taken}}
    hook = job_runtime_env.get("worker_process_setup_hook")
    if hook is None:
        ours["worker_process_setup_hook"] = HOOK
    elif hook != HOOK:
        raise SystemExit(
            f"advbudget: the job's runtime env sets worker_process_setup_hook={hook!r}; the "
            f"advbudget estimators need {HOOK!r} there (Ray runs one hook)"
        )
    return {key: value for key, value in ours.items() if value}


def init_ray() -> None:
    """Start or join Ray with our patch in every worker (a no-op when Ray is up)."""
    import ray

    if not ray.is_initialized():
        ray.init(runtime_env=runtime_env() or None)


def main(argv: Sequence[str] | None = None) -> Any:
    """Run (or with ``--advbudget.parse_only`` only parse) OpenRLHF's PPO trainer.

    Returns the hierarchised args in parse-only mode, else None.
    """
    check_openrlhf_version()
    argv = list(sys.argv[1:] if argv is None else argv)
    parse_only = "--advbudget.parse_only" in argv
    saved_argv = sys.argv
    sys.argv = ["openrlhf.cli.train_ppo_ray", *argv]
    try:
        with openrlhf_parser(ESTIMATOR_FLAG, estimator_names, _add_own_flags, validate):
            if parse_only:
                # Only the parser and checks of train_ppo_ray: its trainer imports need vLLM.
                try:
                    run_main_block()
                except ParsedOnly as parsed:
                    estimator = parsed.parsed.algo.advantage.estimator
                    print(f"advbudget: flags parse; estimator {estimator}")
                    return parsed.parsed
            install()
            init_ray()
            runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    finally:
        sys.argv = saved_argv
    return None


if __name__ == "__main__":
    main()
