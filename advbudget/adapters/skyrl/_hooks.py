"""Every SkyRL symbol the adapter subclasses, overrides, calls or registers into (skyrl
0.4.0), in one table, and the only code that touches a private one.

A SkyRL upgrade starts here: the shared adapter suite (``tests/adapters/contract``) resolves
each record of :data:`HOOKS` in the installed SkyRL and compares its signature, so what moved
fails in one list; no other module of the adapter names a private SkyRL symbol.

Nothing is patched. SkyRL's own extension points carry the adapter: its estimator registry,
its typed config extended by a subclass (``make_config``), its ``trainer.override_entrypoint``
dispatch, a ``BasePPOExp`` subclass that builds a ``RayPPOTrainer`` subclass, and a
``TrainingCallback``. The one private name is the registry's dict, read to register our
estimators idempotently (SkyRL raises on a name registered twice). ``mirrors`` is the SkyRL
line the code answers. SkyRL is imported only when a function runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._hooks import Hook

_AT = "skyrl/"
_PPO = "skyrl.backends.skyrl_train.utils.ppo_utils"
_PPO_AT = f"{_AT}backends/skyrl_train/utils/ppo_utils.py"
_TRAINER = "skyrl.train.trainer"
_MAIN = "skyrl.train.entrypoints.main_base"
_CONFIG = "skyrl.train.config"
_OUTCOME = "(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: numpy.ndarray"
_RESULT = "-> tuple[torch.Tensor, torch.Tensor]"
_BATCH = "skyrl.backends.skyrl_train.training_batch.TrainingInputBatch"
_CALLBACK = "(self, trainer, callback_input: 'CallbackInput', control: 'TrainingControl') -> 'None'"

HOOKS: tuple[Hook, ...] = (
    # The registry: our estimators by name; SkyRL syncs it to its Ray workers (a named actor
    # of cloudpickled functions).
    Hook(_PPO, "AdvantageEstimatorRegistry", None, f"{_PPO_AT}:414", "register"),
    Hook(
        _PPO,
        "AdvantageEstimatorRegistry.register",
        "(name: Union[str, enum.StrEnum], func: Callable)",
        f"{_PPO_AT}:286",
        "call",
    ),
    Hook(_PPO, "AdvantageEstimatorRegistry._functions", None, f"{_PPO_AT}:211", "write"),
    # What SkyRL's dispatch hands an estimator (SKYRL_PASSES), and the three estimators our
    # mirrors take the signatures of.
    Hook(
        _PPO,
        "compute_advantages_and_returns",
        "(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: numpy.ndarray, "
        "adv_estimator: skyrl.backends.skyrl_train.utils.ppo_utils.AdvantageEstimator, config: "
        "skyrl.train.config.config.AlgorithmConfig, values: Optional[torch.Tensor] = None, "
        f"grpo_norm_by_std: bool = True, gamma=1.0, lambd=1.0, **kwargs) {_RESULT}",
        f"{_PPO_AT}:1436",
        "read",
    ),
    Hook(
        _PPO,
        "compute_grpo_outcome_advantage",
        f"{_OUTCOME}, epsilon: float = 1e-06, grpo_norm_by_std: bool = True, **kwargs) {_RESULT}",
        f"{_PPO_AT}:1344",
        "read",
    ),
    Hook(
        _PPO,
        "compute_rloo_outcome_advantage",
        f"{_OUTCOME}, **kwargs) {_RESULT}",
        f"{_PPO_AT}:1260",
        "read",
    ),
    Hook(
        _PPO,
        "compute_maxrl_advantage",
        f"{_OUTCOME}, epsilon: float = 1e-06, **kwargs) {_RESULT}",
        f"{_PPO_AT}:1397",
        "read",
    ),
    # The config: trainer.algorithm gains the `advbudget` mapping (explicit subclasses).
    Hook(_CONFIG, "AlgorithmConfig", None, f"{_AT}train/config/config.py:903", "subclass"),
    Hook(_CONFIG, "TrainerConfig", None, f"{_AT}train/config/config.py:1452", "subclass"),
    Hook(_CONFIG, "SkyRLTrainConfig", None, f"{_AT}train/config/config.py:1838", "subclass"),
    Hook(
        _CONFIG,
        "SkyRLTrainConfig.from_cli_overrides",
        "(args: Union[List[str], dict]) -> 'SkyRLTrainConfig'",
        f"{_AT}train/config/config.py:1945",
        "call",
    ),
    # The entry point: main_base's override_entrypoint dispatch reaches our main(), which
    # runs SkyRL's own validation and Ray start-up (registry sync included).
    Hook(_MAIN, "main", "() -> None", f"{_AT}train/entrypoints/main_base.py:345", "read"),
    Hook(
        "skyrl.train.utils.utils",
        "validate_cfg",
        "(cfg: skyrl.train.config.config.SkyRLTrainConfig)",
        f"{_AT}train/utils/utils.py:372",
        "call",
    ),
    Hook(
        "skyrl.train.utils.utils",
        "initialize_ray",
        "(cfg: skyrl.train.config.config.SkyRLTrainConfig)",
        f"{_AT}train/utils/utils.py:1202",
        "call",
    ),
    Hook(_MAIN, "BasePPOExp", None, f"{_AT}train/entrypoints/main_base.py:43", "subclass"),
    Hook(
        _MAIN,
        "BasePPOExp.get_trainer",
        "(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client, "
        "generator: skyrl.train.generators.base.GeneratorInterface, colocate_pg) -> "
        "skyrl.train.trainer.RayPPOTrainer",
        f"{_AT}train/entrypoints/main_base.py:155",
        "override",
    ),
    # The trainer: the step's features around SkyRL's own advantage call, and κ_eff around
    # its update. `all_metrics` is the dict SkyRL logs at the step's end.
    Hook(_TRAINER, "RayPPOTrainer", None, f"{_AT}train/trainer.py:107", "subclass"),
    Hook(
        _TRAINER,
        "RayPPOTrainer.__init__",
        "(self, cfg: skyrl.train.config.config.SkyRLTrainConfig, tracker: "
        "skyrl.train.utils.tracking.Tracking, tokenizer: "
        "transformers.models.auto.tokenization_auto.AutoTokenizer, train_dataset: "
        "Optional[skyrl.train.dataset.dataset.PromptDataset], inference_engine_client: "
        "skyrl.backends.skyrl_train.inference_servers.base.InferenceEngineInterface, generator: "
        "skyrl.train.generators.base.GeneratorInterface, colocate_pg: "
        "Optional[skyrl.train.utils.utils.ResolvedPlacementGroup] = None, eval_dataset: "
        "Optional[skyrl.train.dataset.dataset.PromptDataset] = None, callbacks: "
        "Optional[List[skyrl.train.utils.callbacks.TrainingCallback]] = None)",
        f"{_AT}train/trainer.py:108",
        "write",
        attribute="all_metrics",
    ),
    Hook(
        _TRAINER,
        "RayPPOTrainer.compute_advantages_and_returns",
        f"(self, data: {_BATCH}) -> {_BATCH}",
        f"{_AT}train/trainer.py:1151",
        "override",
    ),
    Hook(
        _TRAINER,
        "RayPPOTrainer.train_critic_and_policy",
        f"(self, data: {_BATCH})",
        f"{_AT}train/trainer.py:1586",
        "override",
    ),
    Hook(
        "skyrl.backends.skyrl_train.workers.worker_dispatch",
        "WorkerDispatch.forward",
        "(self, model: str, data: skyrl.backends.skyrl_train.training_batch.TrainingInputBatch, "
        "loss_fn: Optional[str] = None, loss_fn_config: Optional[Dict[str, Any]] = None, "
        "model_id: Optional[str] = None, **worker_kwargs) -> "
        "skyrl.backends.skyrl_train.distributed.dispatch.WorkerOutput",
        f"{_AT}backends/skyrl_train/workers/worker_dispatch.py:237",
        "call",
    ),
    Hook(
        "skyrl.backends.skyrl_train.workers.worker_dispatch",
        "WorkerDispatch.get_lcm_dp_size",
        "(self) -> int",
        f"{_AT}backends/skyrl_train/workers/worker_dispatch.py:125",
        "call",
    ),
    Hook(
        "skyrl.backends.skyrl_train.distributed.dispatch",
        "loss_fn_outputs_to_tensor",
        "(outputs: List[Dict[str, Any]], key: str = 'logprobs', pad_value: float = 0.0, "
        "dtype=torch.float32, device=None) -> torch.Tensor",
        f"{_AT}backends/skyrl_train/distributed/dispatch.py:329",
        "call",
    ),
    Hook(
        "skyrl.backends.skyrl_train.training_batch",
        "pad_training_input_batch",
        f"(unpadded_batch: {_BATCH}, pad_size: int) -> {_BATCH}",
        f"{_AT}backends/skyrl_train/training_batch.py:630",
        "call",
    ),
    # The callback: the run's memory saved beside each checkpoint, and read back on resume.
    Hook(
        "skyrl.train.utils.callbacks",
        "TrainingCallback",
        None,
        f"{_AT}train/utils/callbacks.py:83",
        "subclass",
    ),
    Hook(
        "skyrl.train.utils.callbacks",
        "TrainingCallback.on_save",
        _CALLBACK,
        f"{_AT}train/utils/callbacks.py:110",
        "override",
    ),
    Hook(
        "skyrl.train.utils.callbacks",
        "TrainingCallback.on_train_start",
        _CALLBACK,
        f"{_AT}train/utils/callbacks.py:86",
        "override",
    ),
)


def estimator_registry() -> Any:
    """SkyRL's ``AdvantageEstimatorRegistry`` (a class of class methods)."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry

    return AdvantageEstimatorRegistry


def registered_estimator(name: str) -> Callable[..., Any] | None:
    """The function registered under ``name`` in this process (None if none). SkyRL's
    ``list_available`` and ``get`` would first sync with its Ray actor; this reads the
    process's own dict."""
    functions: dict[str, Callable[..., Any]] = estimator_registry()._functions
    return functions.get(name)


def forget_estimator(name: str) -> None:
    """Remove ``name`` from this process's registry dict, so SkyRL's ``register`` takes a
    replacement (it raises on a name present; its actor entry is overwritten by it)."""
    estimator_registry()._functions.pop(name, None)
