"""Every private verl symbol advbudget uses (verl 0.9.1, TransferQueue 0.1.x), in one table,
and the only code that touches them.

A verl upgrade starts here: ``tests/adapters/verl/test_hooks.py`` resolves each record of
:data:`HOOKS` and compares its signature, so what moved fails in one list; no other module
of the adapter names a private verl symbol (the same test checks that too).

Nothing here runs at ``import verl`` beyond registering names: the trainer overrides run only
in the ``advbudget_*`` trainer modes, the replay-buffer overrides only with
``skipped_groups=resample``, and the actor's ``train_batch`` is wrapped only in the worker
processes of an ``advbudget_*`` trainer with ``skipped_groups=drop`` (the trainer hands them
:data:`KEPT_ROWS_ENV` through verl's worker environment; :func:`install_requested`). verl's
async trainers are only read, from inside our estimator (:func:`async_advantage_step`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Iterator
from typing import Any

from .._hooks import Hook

_TRAINER = "verl.trainer.ppo.v1.trainer_base"
_BUFFER = "verl.trainer.ppo.v1.replay_buffer"
_WORKERS = "verl.workers.engine_workers"
_SEPARATION = "verl.experimental.separation.ray_trainer"
_FULLY_ASYNC = "verl.experimental.fully_async_policy.fully_async_trainer"
_ONE_STEP_OFF = "verl.experimental.one_step_off_policy.ray_trainer"
_V1_UTILS = "verl.trainer.ppo.v1.utils"

HOOKS: tuple[Hook, ...] = (
    # Registration: our estimator names and trainer modes.
    Hook(
        "verl.trainer.ppo.core_algos",
        "ADV_ESTIMATOR_REGISTRY",
        None,
        "verl/trainer/ppo/core_algos.py:104",
        "register",
    ),
    Hook(
        _TRAINER, "TRAINER_REGISTRY", None, "verl/trainer/ppo/v1/trainer_base.py:1996", "register"
    ),
    # verl hands non_tensor_batch (the reward components) to its own gdpo only: ours read the
    # `data` argument of the compute_advantage call that runs them.
    Hook(
        "verl.trainer.ppo.ray_trainer",
        "compute_advantage",
        "(data: verl.protocol.DataProto, adv_estimator: verl.trainer.ppo.core_algos."
        "AdvantageEstimator, gamma: float = 1.0, lam: float = 1.0, num_repeat: int = 1, "
        "norm_adv_by_std_in_grpo: bool = True, config: Optional[verl.trainer.config.algorithm."
        "AlgoConfig] = None) -> verl.protocol.DataProto",
        "verl/trainer/ppo/ray_trainer.py:187",
        "read",
    ),
    # verl's V1 advantage step (trainer_base.py:1775, batch_keys=batch.keys, the keys of
    # the rows it fetched at :1746) scores each session's outputs as one trajectory for its
    # own grpo only: ours read `batch_keys` from its frame when they run on its `data`
    # (its other estimators' branch, utils.py:168-177) and count sessions too (._sessions).
    Hook(
        _V1_UTILS,
        "compute_advantage_for_multi_trajectories",
        "(data: verl.protocol.DataProto, batch_keys: list[str], adv_estimator, gamma: float = "
        "1.0, lam: float = 1.0, num_repeat: int = 1, norm_adv_by_std_in_grpo: bool = True, "
        "config: Any = None) -> verl.protocol.DataProto",
        "verl/trainer/ppo/v1/utils.py:148",
        "read",
    ),
    # The advbudget_* trainers: verl's v1 trainer of the base mode, whose class branches on
    # the literal mode name (so they hand it the base mode's name).
    Hook(
        _TRAINER,
        "PPOTrainer.__init__",
        "(self, config: omegaconf.dictconfig.DictConfig)",
        "verl/trainer/ppo/v1/trainer_base.py:120",
        "read",
        attribute="trainer_mode",
    ),
    Hook(
        _TRAINER,
        "PPOTrainer._setup",
        "(self)",
        "verl/trainer/ppo/v1/trainer_base.py:226",
        "override",
    ),
    Hook(
        _TRAINER,
        "PPOTrainer._compute_advantage",
        "(self, batch: transfer_queue.metadata.KVBatchMeta, metrics: dict) -> "
        "transfer_queue.metadata.KVBatchMeta",
        "verl/trainer/ppo/v1/trainer_base.py:1743",
        "override",
    ),
    Hook(
        _TRAINER,
        "PPOTrainer._update_actor",
        "(self, batch: transfer_queue.metadata.KVBatchMeta, metrics: dict) -> "
        "transfer_queue.metadata.KVBatchMeta",
        "verl/trainer/ppo/v1/trainer_base.py:1827",
        "override",
    ),
    Hook(
        _TRAINER,
        "PPOTrainer._save_checkpoint",
        "(self)",
        "verl/trainer/ppo/v1/trainer_base.py:948",
        "override",
    ),
    Hook(
        _TRAINER,
        "PPOTrainer._load_checkpoint",
        "(self)",
        "verl/trainer/ppo/v1/trainer_base.py:850",
        "override",
    ),
    # drop's kept-row count: verl's worker environment carries the switch to the workers.
    Hook(_TRAINER, "RayWorkerGroup", None, "verl/trainer/ppo/v1/trainer_base.py:310", "write"),
    Hook(
        "verl.single_controller.ray.base",
        "RayWorkerGroup.__init__",
        "(self, resource_pool: verl.single_controller.ray.base.RayResourcePool = None, "
        "ray_cls_with_init: verl.single_controller.ray.base.RayClassWithInitArgs = None, "
        "bin_pack: bool = True, name_prefix: str = None, detached=False, worker_names=None, "
        "worker_handles: list[ray.actor.ActorHandle] = None, "
        "ray_wait_register_center_timeout: int = 300, **kwargs) -> None",
        "verl/single_controller/ray/base.py:466",
        "call",
        attribute="customized_worker_env",  # kwargs["worker_env"]: each worker's environment
    ),
    Hook(
        _WORKERS,
        "TrainingWorker.train_batch",
        "(self, data: tensordict._td.TensorDict) -> tensordict._td.TensorDict",
        "verl/workers/engine_workers.py:341",
        "wrap",
    ),
    # κ_eff: the actor's data-parallel size, and the response part of verl's log-probs.
    Hook(
        "verl.single_controller.base.worker",
        "Worker._query_dispatch_info",
        "(self, mesh_name: str)",
        "verl/single_controller/base/worker.py:103",
        "call",
    ),
    Hook(
        "verl.single_controller.base.worker_group",
        "WorkerGroup.__init__",
        "(self, resource_pool: verl.single_controller.base.worker_group.ResourcePool, "
        "**kwargs) -> None",
        "verl/single_controller/base/worker_group.py:145",
        "read",
        attribute="_dispatch_info",
    ),
    Hook(
        "verl.workers.utils.padding",
        "response_from_nested",
        "(tensor: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor",
        "verl/workers/utils/padding.py:194",
        "call",
    ),
    # resample: verl's sync replay buffer with the estimator's skip rule.
    Hook(
        _BUFFER,
        "ReplayBuffer.__init__",
        "(self, trainer_mode: str, trainer_config: omegaconf.dictconfig.DictConfig, "
        "max_off_policy_threshold: int | None, max_off_policy_strategy: str, sampler_kwargs: "
        "omegaconf.dictconfig.DictConfig, poll_interval: float = 2.0, refill_fn=None, "
        "filter_groups_metric: str | None = None, train_batch_size: int | None = None, "
        "gen_batch_size: int | None = None, max_inflight_gen_batches: int = 1, "
        "sync_refill_failed_groups: bool = False)",
        "verl/trainer/ppo/v1/replay_buffer.py:137",
        "subclass",
    ),
    Hook(
        _BUFFER,
        "ReplayBuffer.__init__",
        None,
        "verl/trainer/ppo/v1/replay_buffer.py:192",
        "read",
        attribute="_dapo_classification_cache",
    ),
    Hook(
        _BUFFER,
        "ReplayBuffer.__init__",
        None,
        "verl/trainer/ppo/v1/replay_buffer.py:187",
        "read",
        attribute="finished_keys",
    ),
    Hook(
        _BUFFER,
        "ReplayBuffer.__init__",
        None,
        "verl/trainer/ppo/v1/replay_buffer.py:184",
        "read",
        attribute="partitions",
    ),
    Hook(
        _BUFFER,
        "ReplayBuffer.__init__",
        None,
        "verl/trainer/ppo/v1/replay_buffer.py:158",
        "write",
        attribute="refill_fn",
    ),
    Hook(
        _BUFFER,
        "ReplayBuffer._dapo_filtered_keys",
        "(self, partition_id: str) -> tuple[set[str], collections.Counter]",
        "verl/trainer/ppo/v1/replay_buffer.py:261",
        "override",
    ),
    Hook(
        _BUFFER,
        "ReplayBuffer._select_prompt_uids",
        "(self, partition_id: str, sampleable_keys: set[str], batch_size: int) -> "
        "tuple[list[str], dict[str, dict], dict[str, int]]",
        "verl/trainer/ppo/v1/replay_buffer.py:383",
        "override",
    ),
    Hook(
        _BUFFER,
        "ReplayBuffer.sample",
        "(self, global_steps: int, partition_id: str, batch_size: int) -> "
        "tuple[transfer_queue.metadata.KVBatchMeta, dict]",
        "verl/trainer/ppo/v1/replay_buffer.py:421",
        "override",
    ),
    # The async trainers (experimental fully_async_policy, one_step_off_policy): our
    # estimator reads the step's trainer and batch from the frame of verl's advantage step
    # (no patch), each rollout's weights label and the trainer's version (the staleness rule).
    Hook(
        _SEPARATION,
        "SeparateRayPPOTrainer._fit_compute_advantage",
        "(self, batch) -> verl.protocol.DataProto",
        "verl/experimental/separation/ray_trainer.py:576",
        "read",
    ),
    Hook(
        _SEPARATION,
        "SeparateRayPPOTrainer.__init__",
        None,
        "verl/experimental/separation/ray_trainer.py:98",
        "write",
        attribute="metrics",  # the step's metrics dict (fit_step makes it), logged after it
    ),
    Hook(
        _SEPARATION,
        "SeparateRayPPOTrainer.__init__",
        None,
        "verl/experimental/separation/ray_trainer.py:88",
        "read",
        attribute="global_steps",
    ),
    Hook(
        _FULLY_ASYNC,
        "FullyAsyncTrainer",
        None,
        "verl/experimental/fully_async_policy/fully_async_trainer.py:54",
        "read",
    ),
    Hook(  # set at :143 too (Ray's actor class hides that __init__ from the lookup)
        _FULLY_ASYNC,
        "FullyAsyncTrainer.load_checkpoint",
        "(self)",
        "verl/experimental/fully_async_policy/fully_async_trainer.py:1010",
        "read",
        attribute="current_param_version",  # +1 a weight sync (:687), after the advantage
    ),
    Hook(
        _ONE_STEP_OFF,
        "OneStepOffRayTrainer",
        None,
        "verl/experimental/one_step_off_policy/ray_trainer.py:49",
        "read",
    ),
    # Each rollout's weights label: verl's agent loop copies the LLM server's global_steps
    # (max over a partial rollout's resumes) into non_tensor_batch.
    Hook(
        "verl.experimental.agent_loop.agent_loop",
        "AgentLoopWorker._postprocess",
        None,
        "verl/experimental/agent_loop/agent_loop.py:1126",
        "read",
    ),
    # TransferQueue: the v1 trainer's batch store (public API, recorded for its upgrades).
    Hook(
        "transfer_queue",
        "kv_batch_get",
        "(keys: list[str] | str, partition_id: str, select_fields: list[str] | str | None = "
        "None) -> tensordict._td.TensorDict",
        "transfer_queue/interface.py:513",
        "call",
    ),
    Hook(
        "transfer_queue",
        "kv_batch_put",
        "(keys: list[str], partition_id: str, fields: tensordict._td.TensorDict | None = None, "
        "tags: list[dict[str, typing.Any]] | None = None, data_parser: Optional[Callable[[Any], "
        "Any]] = None) -> transfer_queue.metadata.KVBatchMeta",
        "transfer_queue/interface.py:414",
        "call",
    ),
)


# -- registries -------------------------------------------------------------------------


def estimator_registry() -> dict[str, Any]:
    """verl's estimator registry (``register_adv_est`` fills it; we replace our own)."""
    from verl.trainer.ppo import core_algos

    registry: dict[str, Any] = core_algos.ADV_ESTIMATOR_REGISTRY
    return registry


def trainer_registry() -> dict[str, Any]:
    """verl's v1 trainer registry (``register_trainer`` fills it; we replace our own)."""
    from verl.trainer.ppo.v1 import trainer_base

    registry: dict[str, Any] = trainer_base.TRAINER_REGISTRY
    return registry


# -- compute_advantage's batch ----------------------------------------------------------


def compute_advantage_data() -> Any:
    """The ``data`` (a ``DataProto``) of the verl ``compute_advantage`` call this estimator
    runs under, or None (called directly, or by another caller)."""
    from verl.trainer.ppo import ray_trainer

    code = inspect.unwrap(ray_trainer.compute_advantage).__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return frame.f_locals.get("data")
        frame = frame.f_back  # type: ignore[assignment]
    return None


def multi_output_keys() -> list[str] | None:
    """The ``batch_keys`` of verl's V1 advantage step
    (``compute_advantage_for_multi_trajectories``, one key per row of its ``data``) when
    this estimator runs under it on that ``data`` itself, else None (its grpo branch scores
    a selection of the rows; the legacy and async trainers, a direct call)."""
    module = sys.modules.get(_V1_UTILS)
    if module is None:  # never imported: not under it
        return None
    from verl.trainer.ppo import ray_trainer

    step = inspect.unwrap(module.compute_advantage_for_multi_trajectories).__code__
    call = inspect.unwrap(ray_trainer.compute_advantage).__code__
    data = None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is call and data is None:
            data = frame.f_locals.get("data")
        elif frame.f_code is step:
            if data is None or frame.f_locals.get("data") is not data:
                return None
            return [str(key) for key in frame.f_locals.get("batch_keys") or ()]
        frame = frame.f_back  # type: ignore[assignment]
    return None


# -- the async trainers' advantage step ---------------------------------------------------

#: verl's async trainers whose weights labels the adapter knows -> their kind (what a label
#: means in each: :mod:`._staleness`).
ASYNC_TRAINERS = {
    (_FULLY_ASYNC, "FullyAsyncTrainer"): "fully_async",
    (_ONE_STEP_OFF, "OneStepOffRayTrainer"): "one_step_off",
}


def async_advantage_step() -> tuple[Any, Any] | None:
    """``(trainer, batch)`` of verl's async advantage step
    (``SeparateRayPPOTrainer._fit_compute_advantage``, both async trainers') this estimator
    runs under, or None (any other caller: the v1 and legacy trainers, a direct call)."""
    module = sys.modules.get(_SEPARATION)
    if module is None:  # never imported: not under it
        return None
    # Ray only sets a __signature__ on the methods of an actor's class: the code is verl's.
    code = inspect.unwrap(module.SeparateRayPPOTrainer._fit_compute_advantage).__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return frame.f_locals.get("self"), frame.f_locals.get("batch")
        frame = frame.f_back  # type: ignore[assignment]
    return None


def async_trainer_kind(trainer: Any) -> str | None:
    """``fully_async`` or ``one_step_off`` (:data:`ASYNC_TRAINERS`), by the verl class the
    trainer is or extends (Ray's actor wraps FullyAsyncTrainer in a subclass); None for
    another trainer."""
    for cls in type(trainer).__mro__:
        kind = ASYNC_TRAINERS.get((cls.__module__, cls.__name__))
        if kind is not None:
            return kind
    return None


def weights_labels(batch: Any) -> Any:
    """Each rollout's weights label (``non_tensor_batch["max_global_steps"]``: the label of
    the newest weights that generated its tokens), or None without the key."""
    return batch.non_tensor_batch.get("max_global_steps")


def trainer_label(trainer: Any, kind: str) -> int:
    """The async trainer's own label: fully_async's ``current_param_version`` (weight syncs
    so far), one_step_off's ``global_steps`` (the step running)."""
    if kind == "fully_async":
        return int(trainer.current_param_version)
    return int(trainer.global_steps)


def step_metrics_dict(trainer: Any) -> dict[str, Any]:
    """The async trainer's metrics of the running step (verl logs them after the step)."""
    metrics: dict[str, Any] = trainer.metrics
    return metrics


# -- the advbudget_* trainers -----------------------------------------------------------


class TrainerHooks:
    """verl's private trainer methods, each handed to a public method of the advbudget
    trainer (:mod:`._trainer`), which lists first in the subclass's bases."""

    def _setup(self) -> None:
        with worker_environment(self.worker_environment()):  # type: ignore[attr-defined]
            super()._setup()  # type: ignore[misc]

    def _compute_advantage(self, batch: Any, metrics: dict[str, Any]) -> Any:
        with self.advantage_context(batch, metrics):  # type: ignore[attr-defined]
            batch = super()._compute_advantage(batch, metrics=metrics)  # type: ignore[misc]
        return self.after_advantage(batch, metrics)  # type: ignore[attr-defined]

    def _update_actor(self, batch: Any, metrics: dict[str, Any]) -> Any:
        return self.update_actor(batch, metrics)  # type: ignore[attr-defined]

    def verl_update_actor(self, batch: Any, metrics: dict[str, Any]) -> Any:
        """verl's own actor update."""
        return super()._update_actor(batch, metrics=metrics)  # type: ignore[misc]

    def _save_checkpoint(self) -> Any:
        out = super()._save_checkpoint()  # type: ignore[misc]
        self.after_save()  # type: ignore[attr-defined]
        return out

    def _load_checkpoint(self) -> Any:
        out = super()._load_checkpoint()  # type: ignore[misc]
        self.after_load()  # type: ignore[attr-defined]
        return out


@contextlib.contextmanager
def worker_environment(environment: dict[str, str]) -> Iterator[None]:
    """While verl's trainer creates its worker groups, add ``environment`` to each worker's
    (verl's ``RayWorkerGroup(worker_env=...)``, which the trainer does not set itself)."""
    if not environment:
        yield
        return
    from verl.trainer.ppo.v1 import trainer_base

    base = trainer_base.RayWorkerGroup

    class WithEnvironment(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["worker_env"] = {**(kwargs.get("worker_env") or {}), **environment}
            super().__init__(*args, **kwargs)

    trainer_base.RayWorkerGroup = WithEnvironment
    try:
        yield
    finally:
        trainer_base.RayWorkerGroup = base


def data_parallel_size(worker_group: Any) -> int:
    """The actor's data-parallel size (as verl's ``_balance_batch`` reads it); 1 without
    dispatch information."""
    info = getattr(worker_group, "_dispatch_info", None)
    if info is None or not hasattr(worker_group, "_query_dispatch_info"):
        return 1
    if "actor" not in info:
        info["actor"] = worker_group._query_dispatch_info("actor")
    return int(max(info["actor"])) + 1


def log_prob_rows(rows: int, *, dp_size: int, micro_batch_size: int | None = None) -> int:
    """The size of an extra ``compute_log_prob`` sub-batch (κ_eff's pairs, spo's kept
    responses) of ``rows`` rows: the least multiple of what the actor accepts. verl splits
    the rows evenly over the ``dp_size`` data-parallel ranks
    (``make_nd_compute_dataproto_dispatch_fn``); with fixed micro-batches each rank's
    share must then be a multiple of its micro-batch size
    (``verl/workers/engine/utils.py:125``), so the whole a multiple of ``dp_size *
    micro_batch_size``; with dynamic micro-batches (``micro_batch_size`` ``None``) a
    multiple of ``dp_size``.

    Examples:
        >>> log_prob_rows(6, dp_size=1, micro_batch_size=8), log_prob_rows(6, dp_size=4)
        (8, 8)
        >>> log_prob_rows(6, dp_size=2, micro_batch_size=2)  # not lcm(2, 2): 3 rows a rank
        8
    """
    multiple = dp_size * (micro_batch_size or 1)
    return -(-rows // multiple) * multiple


def log_prob_micro_batch_size(actor_rollout_ref: Any) -> int | None:
    """The micro-batch size per GPU of the actor's ``compute_log_prob``, ``None`` with
    dynamic micro-batches. verl's engine worker takes them from the rollout config:
    ``log_prob_use_dynamic_bsz`` (asserted equal to the actor's ``use_dynamic_bsz``) and
    ``log_prob_micro_batch_size_per_gpu`` (``verl/workers/engine_workers.py:616-624``)."""
    rollout = actor_rollout_ref.rollout
    if bool(rollout.get("log_prob_use_dynamic_bsz", False)):
        return None
    size = rollout.get("log_prob_micro_batch_size_per_gpu")
    return int(size) if size else None


def response_log_probs(log_probs: Any, response_mask: Any) -> Any:
    """The response part of verl's nested prompt+response log-probs, as verl slices it."""
    from verl.workers.utils.padding import response_from_nested

    return response_from_nested(log_probs, response_mask)


# -- drop's kept-row count, in the actor's workers ----------------------------------------

#: Set in the worker environment by an ``advbudget_*`` trainer with ``skipped_groups=drop``.
KEPT_ROWS_ENV = "ADVBUDGET_VERL_KEPT_ROWS"


def install_requested() -> bool:
    """Install the patches this process was asked for (:data:`KEPT_ROWS_ENV`); returns
    whether it was asked. Run when the adapter is imported (verl's plugin hooks)."""
    if os.environ.get(KEPT_ROWS_ENV) != "1":
        return False
    install_kept_row_count()
    return True


def install_kept_row_count() -> bool:
    """Wrap verl's ``TrainingWorker.train_batch`` (once a process) with
    :func:`._skipped.with_kept_row_count`; False without verl's engine workers."""
    try:
        from verl.workers import engine_workers
    except ImportError:
        return False
    from ._skipped import with_kept_row_count

    worker = engine_workers.TrainingWorker
    if not getattr(worker.train_batch, "_advbudget_kept_rows", False):
        worker.train_batch = _marked(with_kept_row_count(worker.train_batch))
    return True


def _marked(wrapper: Any) -> Any:
    wrapper._advbudget_kept_rows = True
    return wrapper


def data_parallel_group(worker: Any) -> Any:
    """The process group of a ``TrainingWorker``'s data-parallel ranks."""
    return worker.engine.get_data_parallel_group()


# -- resample: verl's sync replay buffer --------------------------------------------------


class ReplayBufferHooks:
    """verl's private replay-buffer methods, each handed to a public method of the
    resampling buffer (:mod:`._resample`), which lists first in the subclass's bases."""

    def _dapo_filtered_keys(self, partition_id: str) -> Any:
        return self.filtered_groups(partition_id)  # type: ignore[attr-defined]

    def _select_prompt_uids(
        self, partition_id: str, sampleable_keys: set[str], batch_size: int
    ) -> Any:
        keys = self.sampleable(partition_id, sampleable_keys, batch_size)  # type: ignore[attr-defined]
        return super()._select_prompt_uids(partition_id, keys, batch_size)  # type: ignore[misc]

    def classified(self, partition_id: str) -> dict[str, float | None]:
        """verl's DAPO classification of the partition's groups: uid -> the group's reward
        when the group is filtered out, None when kept."""
        return self._dapo_classification_cache[partition_id]  # type: ignore[attr-defined,no-any-return]


@functools.cache
def replay_buffer() -> type:
    """verl's sync replay buffer class (imports verl's trainer and TransferQueue)."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    buffer: type = ReplayBuffer
    return buffer
