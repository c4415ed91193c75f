"""Every tunix symbol the adapter overrides, calls privately, writes or registers into
(google-tunix 0.1.7), in one table, and the only code that touches a private one.

A tunix upgrade starts here: the shared adapter suite (``tests/adapters/contract``) resolves
each record of :data:`HOOKS` in the installed tunix and compares its signature, so what moved
fails in one list; no other module of the adapter names a private tunix symbol (the same
suite checks that).

Nothing is patched: :class:`LearnerHooks` overrides ``GRPOLearner``'s private methods in the
subclass only, and the functions below read or call tunix's private state of one cluster or
trainer. ``mirrors`` is the tunix line the code answers: an override's or a call's ``def``,
or the line that sets an attribute. tunix is imported only when a function runs.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

from .._hooks import Hook

_AT = "tunix/rl/"
_GRPO = "tunix.rl.grpo.grpo_learner"
_LEARNER = "tunix.rl.rl_learner"
_CLUSTER = "tunix.rl.rl_cluster"
_REGISTRY = "tunix.rl.function_registry"
_PEFT = "tunix.sft.peft_trainer"
_AGENTIC_GRPO = "tunix.rl.agentic.agentic_grpo_learner"
_AGENTIC_RL = "tunix.rl.agentic.agentic_rl_learner"

_STEP_ARGS = (
    "service_target_batch_size: 'int', grad_acc_steps: 'int', train_iterator: "
    "'Iterator[TrainingInputT]', eval_ds: 'Iterable[TrainingInputT] | None', skip_jit: 'bool') "
    "-> 'None'"
)

HOOKS: tuple[Hook, ...] = (
    # The learners subclass GRPOLearner (and DAPOLearner) and pass its arguments through,
    # adding their metric function to `metric_fns`.
    Hook(_GRPO, "GRPOLearner", None, f"{_AT}grpo/grpo_learner.py:116", "subclass"),
    Hook(
        _GRPO,
        "GRPOLearner.__init__",
        "(self, rl_cluster: 'rl_cluster_lib.RLCluster', algo_config: 'TGrpoConfig', "
        "reward_fns: 'RewardFn | List[RewardFn]', metric_fns: 'Sequence[MetricFn] | None' = "
        "None, data_shuffle_seed: 'int | None' = None)",
        f"{_AT}grpo/grpo_learner.py:128",
        "subclass",
    ),
    Hook(
        "tunix.rl.grpo.dapo_learner",
        "DAPOLearner",
        None,
        f"{_AT}grpo/dapo_learner.py:133",
        "subclass",
    ),
    # The overrides (LearnerHooks). tunix has no hook after its estimator: the step that
    # calls it (on tunix's data thread, grpo_learner.py:319) returns the TrainExample the
    # learner masks and scores; the mini-batch step's end is κ_eff's "after" pass, the
    # global step's end (before tunix counts it) its flush.
    Hook(
        _GRPO,
        "GRPOLearner._generate_and_compute_advantage",
        "(self, training_input: 'TrainingInputT', mode: 'rl_cluster_lib.Mode' = "
        "<Mode.TRAIN: 'train'>) -> 'TrainExample'",
        f"{_AT}grpo/grpo_learner.py:205",
        "override",
    ),
    # spo's rho="kl": inside that step's estimator call (grpo_learner.py:319), the step's
    # prompt and completion tokens, their mask and the policy's old log-probs, read from
    # its frame (grpo_step_tokens).
    Hook(
        _GRPO,
        "GRPOLearner._generate_and_compute_advantage",
        "(self, training_input: 'TrainingInputT', mode: 'rl_cluster_lib.Mode' = "
        "<Mode.TRAIN: 'train'>) -> 'TrainExample'",
        f"{_AT}grpo/grpo_learner.py:319",
        "read",
    ),
    Hook(
        _LEARNER,
        "RLLearner._run_mini_batch_step",
        f"(self, initial_steps: 'int', {_STEP_ARGS}",
        f"{_AT}rl_learner.py:662",
        "override",
    ),
    Hook(
        _LEARNER,
        "RLLearner._run_global_step",
        f"(self, full_batch_size: 'int', mini_batch_size: 'int', {_STEP_ARGS}",
        f"{_AT}rl_learner.py:633",
        "override",
    ),
    # The prompt ledger rides in the actor checkpoint's custom metadata: tunix restores it
    # when the trainer is built (no public accessor but its global step) and saves what
    # the function returns.
    Hook(
        _PEFT,
        "PeftTrainer.__init__",
        None,
        "tunix/sft/peft_trainer.py:253",
        "read",
        attribute="_restored_custom_metadata",
    ),
    Hook(
        "tunix.rl.trainer",
        "Trainer.__init__",
        None,
        f"{_AT}trainer.py:54",
        "write",
        attribute="custom_checkpoint_metadata_fn",
    ),
    # κ_eff: a training hook chained before the actor's own, the step counters it times
    # the passes by, and the actor's mesh and (offloaded) weights as update_actor
    # (rl_cluster.py:851) enters and loads them.
    Hook("tunix.sft.hooks", "TrainingHooks", None, "tunix/sft/hooks.py:25", "subclass"),
    Hook(
        _PEFT,
        "PeftTrainer.__init__",
        None,
        "tunix/sft/peft_trainer.py:279",
        "read",
        attribute="training_hooks",
    ),
    Hook(
        _PEFT,
        "PeftTrainer.with_training_hooks",
        "(self, training_hooks: tunix.sft.hooks.TrainingHooks)",
        "tunix/sft/peft_trainer.py:284",
        "call",
    ),
    Hook(_PEFT, "PeftTrainer.train_steps", None, "tunix/sft/peft_trainer.py:769", "read"),
    Hook(
        _CLUSTER,
        "RLCluster.__init__",
        None,
        f"{_AT}rl_cluster.py:268",
        "read",
        attribute="global_steps",
    ),
    Hook(
        _CLUSTER,
        "RLCluster._get_mesh_and_logical_axis_rules_cm",
        "(self, role: tunix.rl.rl_cluster.Role)",
        f"{_AT}rl_cluster.py:1206",
        "call",
    ),
    Hook(
        _CLUSTER,
        "RLCluster._maybe_load_model_from_cpu",
        "(self, model: flax.nnx.module.Module, role: tunix.rl.rl_cluster.Role)",
        f"{_AT}rl_cluster.py:653",
        "call",
    ),
    Hook(
        _CLUSTER,
        "RLCluster._maybe_offload_model_to_cpu",
        "(self, model: flax.nnx.module.Module, role: tunix.rl.rl_cluster.Role)",
        f"{_AT}rl_cluster.py:660",
        "call",
    ),
    # κ_eff scores with the loss's own log-prob function, by keyword.
    Hook(
        "tunix.rl.common",
        "compute_per_token_logps",
        "(graphdef, state, prompt_tokens: jax.jaxlib._jax.Array, completion_tokens: "
        "jax.jaxlib._jax.Array, pad_id: int, eos_id: int, images: jax.jaxlib._jax.Array | None "
        "= None, stop_gradient: bool = True, return_logits: bool = False, segment_ids: "
        "jax.jaxlib._jax.Array | None = None, segment_positions: jax.jaxlib._jax.Array | None = "
        "None, temperature: float = 1.0) -> jax.jaxlib._jax.Array | tuple[jax.jaxlib._jax.Array, "
        "jax.jaxlib._jax.Array]",
        f"{_AT}common.py:286",
        "call",
    ),
    # The advantage registry: ours registered by name (re-registering warns, at :79, in
    # words the package's log filter matches), looked up, and listed (no list function:
    # the registry's own, by its private category name).
    Hook(
        _REGISTRY,
        "register_advantage_estimator",
        "(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]",
        f"{_AT}function_registry.py:140",
        "register",
    ),
    Hook(
        _REGISTRY,
        "FunctionRegistry.register",
        "(self, category: str, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]",
        f"{_AT}function_registry.py:79",
        "register",
    ),
    Hook(
        _REGISTRY,
        "get_advantage_estimator",
        "(name: str) -> Callable[..., Any]",
        f"{_AT}function_registry.py:135",
        "call",
    ),
    Hook(_REGISTRY, "default_registry", None, f"{_AT}function_registry.py:120", "read"),
    Hook(
        _REGISTRY,
        "FunctionRegistry.list_functions",
        "(self, category: str) -> List[str]",
        f"{_AT}function_registry.py:110",
        "call",
    ),
    Hook(
        _REGISTRY,
        "_ADVANTAGE_ESTIMATOR_CATEGORY",
        None,
        f"{_AT}function_registry.py:22",
        "read",
    ),
    # The agentic learner (AdvBudgetAgenticGRPOLearner) subclasses tunix's agentic
    # GRPOLearner and overrides the method that scores one group (or, when tunix scores in
    # its consumer, one micro-batch): each trajectory's policy version, stamped on its task
    # at each model call, is lent to our estimator with the learner's current version,
    # which tunix sets when built and raises after each weight sync (:1035).
    Hook(
        _AGENTIC_GRPO, "GRPOLearner", None, f"{_AT}agentic/agentic_grpo_learner.py:146", "subclass"
    ),
    Hook(
        _AGENTIC_GRPO,
        "GRPOLearner._process_results",
        "(self, trajectories: 'List[Any]', mode: 'rl_cluster_lib.Mode' = <Mode.TRAIN: "
        "'train'>, expected_step: 'int | None' = None) -> 'List[TrainExample]'",
        f"{_AT}agentic/agentic_grpo_learner.py:285",
        "override",
    ),
    Hook(
        _AGENTIC_RL,
        "AgenticRLLearner.__init__",
        None,
        f"{_AT}agentic/agentic_rl_learner.py:229",
        "read",
        attribute="policy_version",
    ),
    Hook(
        _AGENTIC_RL,
        "AgenticRLLearner._model_call",
        "(self, chat_lists: 'List[Dict[str, str]]', env: 'Any' = None, max_generation_steps: "
        "'int | None' = None) -> 'base_rollout.RolloutOutput'",
        f"{_AT}agentic/agentic_rl_learner.py:436",
        "read",
    ),
    Hook(
        "tunix.rl.agentic.trajectory.trajectory_collect_engine",
        "TrajectoryCollectEngine.collect",
        "(self, mode: str = 'Conversation') -> Any",
        f"{_AT}agentic/trajectory/trajectory_collect_engine.py:340",
        "read",
    ),
    # drgrpo_config: DrGRPOConfig fixes advantage_estimator (init=False); it is written after.
    Hook(
        "tunix.rl.grpo.drgrpo_learner",
        "DrGRPOConfig",
        None,
        f"{_AT}grpo/drgrpo_learner.py:35",
        "write",
    ),
)


class LearnerHooks:
    """``GRPOLearner``'s private methods, each handed to a public method of
    ``AdvBudgetGRPOLearner`` (:mod:`._learner`), which lists this class first in its bases:
    ``super()`` here is the ``GRPOLearner`` (or ``DAPOLearner``) it subclasses."""

    def _generate_and_compute_advantage(self, training_input: Any, mode: Any = None) -> Any:
        return self.generate_and_compute_advantage(training_input, mode)  # type: ignore[attr-defined]

    def tunix_generate_and_compute_advantage(self, training_input: Any, mode: Any = None) -> Any:
        """tunix's own rollout, rewards and advantages of ``training_input`` (its default
        mode, TRAIN, when ``mode`` is None): a ``TrainExample``."""
        step = super()._generate_and_compute_advantage  # type: ignore[misc]
        return step(training_input) if mode is None else step(training_input, mode)

    def _run_mini_batch_step(self, *args: Any, **kwargs: Any) -> None:
        self.run_mini_batch_step(*args, **kwargs)  # type: ignore[attr-defined]

    def tunix_run_mini_batch_step(self, *args: Any, **kwargs: Any) -> None:
        """tunix's own mini-batch step: every micro-batch of it trained."""
        super()._run_mini_batch_step(*args, **kwargs)  # type: ignore[misc]

    def _run_global_step(self, *args: Any, **kwargs: Any) -> None:
        self.run_global_step(*args, **kwargs)  # type: ignore[attr-defined]

    def tunix_run_global_step(self, *args: Any, **kwargs: Any) -> None:
        """tunix's own global step: each of its mini-batch steps, before tunix counts it."""
        super()._run_global_step(*args, **kwargs)  # type: ignore[misc]


class AgenticLearnerHooks:
    """The agentic ``GRPOLearner``'s private methods, each handed to a public method of
    ``AdvBudgetAgenticGRPOLearner`` (:mod:`._agentic`), which lists this class first in its
    bases: ``super()`` here is tunix's agentic ``GRPOLearner``."""

    def _process_results(
        self, trajectories: Any, mode: Any = None, expected_step: Any = None
    ) -> Any:
        return self.process_results(trajectories, mode, expected_step)  # type: ignore[attr-defined]

    def tunix_process_results(self, trajectories: Any, mode: Any, expected_step: Any) -> Any:
        """tunix's own rewards and advantages of ``trajectories`` (one group, or one
        micro-batch of groups): a list of ``TrainExample``."""
        process = super()._process_results  # type: ignore[misc]
        if mode is None:
            return process(trajectories, expected_step=expected_step)
        return process(trajectories, mode, expected_step)


#: The locals of ``GRPOLearner._generate_and_compute_advantage`` that rho="kl" reads.
STEP_TOKENS = ("prompt_ids", "jax_completion_ids", "completion_mask", "old_per_token_logps")


def grpo_step_tokens() -> dict[str, Any]:
    """Inside the estimator call of tunix's ``GRPOLearner._generate_and_compute_advantage``
    (``grpo_learner.py:319``): its :data:`STEP_TOKENS` (left-padded prompt tokens, padded
    completion tokens, the completion mask, the policy's per-token log-probs or None when
    tunix computed none). A RuntimeError when not under it."""
    import sys

    from tunix.rl.grpo import grpo_learner  # type: ignore[import-not-found, unused-ignore]

    code = grpo_learner.GRPOLearner._generate_and_compute_advantage.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return {name: frame.f_locals.get(name) for name in STEP_TOKENS}
        frame = frame.f_back  # type: ignore[assignment]
    raise RuntimeError(
        "rho='kl': the estimator was not called from tunix's "
        "GRPOLearner._generate_and_compute_advantage; the step's tokens are not at hand"
    )


def trajectory_version(trajectory: Any) -> Any:
    """The policy version tunix stamped on a trajectory (its task's at the last model call;
    None if absent)."""
    return trajectory.traj.get("policy_version")


def restored_checkpoint_metadata(trainer: Any) -> dict[str, Any]:
    """The custom metadata of the checkpoint tunix restored ``trainer`` from ({} if none)."""
    restored: dict[str, Any] = getattr(trainer, "_restored_custom_metadata", None) or {}
    return restored


@contextlib.contextmanager
def on_actor_mesh(cluster: Any, *, load: bool) -> Iterator[Any]:
    """Within the actor's mesh and logical axis rules; yields the actor model. ``load``:
    outside ``RLCluster.update_actor``, so the weights are loaded to the device first if
    tunix offloads them, and offloaded again after, as ``update_actor`` does."""
    from tunix.rl import rl_cluster  # type: ignore[import-not-found, unused-ignore]

    model, actor = cluster.actor_trainer.model, rl_cluster.Role.ACTOR
    with cluster._get_mesh_and_logical_axis_rules_cm(actor):
        if load:
            cluster._maybe_load_model_from_cpu(model, actor)
        yield model
        if load:
            cluster._maybe_offload_model_to_cpu(model, actor)


def advantage_estimator_names() -> list[str]:
    """Every name in tunix's advantage registry."""
    from tunix.rl import function_registry  # type: ignore[import-not-found, unused-ignore]

    category = function_registry._ADVANTAGE_ESTIMATOR_CATEGORY
    return list(function_registry.default_registry.list_functions(category))


def quiet_reregistration(ours: Callable[[str], bool]) -> None:
    """Silence tunix's warning that an advantage estimator is registered again, for the
    names ``ours`` accepts: re-registering ours is expected (each import of the package
    does, and an estimator registered later re-registers its aliases)."""
    from tunix.rl import function_registry  # type: ignore[import-not-found, unused-ignore]

    category = re.escape(function_registry._ADVANTAGE_ESTIMATOR_CATEGORY)
    again = re.compile(rf"Function '(.*)' is already registered in category '{category}'")

    def keep(record: logging.LogRecord) -> bool:
        match = again.search(record.getMessage())
        return match is None or not ours(match.group(1))

    logging.getLogger("absl").addFilter(keep)
