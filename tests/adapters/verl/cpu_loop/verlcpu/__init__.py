"""verlcpu: run verl 0.9.1's real PPO loop (``python -m verl.trainer.main_ppo``) on CPU.

Test support for ``tests/adapters/verl/test_loop.py`` and the CPU mode of
``examples/verl_qwen3.sh`` (``CPU_LOOP=1``); not part of advbudget. verl itself stays
untouched and real (trainer, FSDP2 workers, reward loop, TransferQueue, weight sync,
checkpoints); what a GPU-less machine lacks is supplied from outside, through verl's own
extension points:

- :mod:`verlcpu.platform` (first in ``VERL_USE_EXTERNAL_MODULES``): a ``cpu`` platform for
  verl's platform registry (``VERL_PLATFORM=cpu``), a device-module shim, the gloo
  backend-string fix and the FSDP2 ``pin_memory`` fix, and the ``hfcpu`` rollout
  registrations;
- :mod:`verlcpu.rollout`: the ``hfcpu`` rollout (worker side) and replica (trainer side);
- :mod:`verlcpu.server`: the rollout server, a Ray actor generating with a Hugging Face
  forward loop (imports verl lazily);
- :mod:`verlcpu.ckpt_engine`: the ``hfcpu`` checkpoint engine, the weight sync of verl's
  async trainers (``actor_rollout_ref.rollout.checkpoint_engine.backend=hfcpu``);
- :mod:`verlcpu.probe`: records every advantage-estimator call (pid, step; under the async
  trainers each row's weights label and advantage) to a file;
- :mod:`verlcpu.reward`: a reward with variance inside groups;
- :mod:`verlcpu.tools`: a tool, a tool parser that always calls it and an agent loop with
  one output per assistant turn, for verl's multi-turn rollouts
  (:func:`multi_turn_overrides`).

Environment and overrides: :data:`ENV` and :func:`overrides`. Pinned to verl 0.9.1: the
shim touches private names (``_ROLLOUT_REGISTRY``, ``RolloutReplica`` internals,
``CPUOffloadPolicy``, the ``cpu:gloo,...`` backend string).
"""

from __future__ import annotations

import os

VERL_VERSION = "0.9.1"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # goes on PYTHONPATH
MODULES = "verlcpu.platform,advbudget.adapters.verl,verlcpu.probe"

# Environment of the driver and of every Ray worker (also passed through
# ray_kwargs.ray_init.runtime_env.env_vars by overrides()).
ENV = {
    "VERL_PLATFORM": "cpu",  # verl/plugin/platform/platform_manager.py:90 (the override)
    "VERL_USE_EXTERNAL_MODULES": MODULES,
    # verl/workers/engine/base.py:405: the FSDP engine is registered for cuda/npu only
    # (verl/workers/engine/fsdp/transformer_impl.py:1143) but is device-agnostic.
    "VERL_ENGINE_DEVICE": "cuda",
    "TOKENIZERS_PARALLELISM": "false",
}

# Hydra overrides a CPU run needs on top of a GPU command line. They come last on the
# command line: hydra keeps the last value of a key given twice, and "++" adds or replaces
# (a second "+" on a key would be refused).
OVERRIDES = [
    "trainer.device=cpu",
    "trainer.nnodes=1",
    "ray_kwargs.ray_init.num_cpus=8",
    "++ray_kwargs.ray_init.include_dashboard=False",
    # A cluster of its own (its ports picked free), never another Ray on the machine that
    # ray.init would join (RAY_ADDRESS, or the address file of a running one).
    "++ray_kwargs.ray_init.address=local",
    "actor_rollout_ref.rollout.name=hfcpu",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.calculate_log_probs=True",  # training/rollout_probs_diff_*
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "data.dataloader_num_workers=0",
    # FSDP1 needs an accelerator (transformer_impl.py:441 device_id=...); FSDP2 does not.
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    # flash-attention is verl's default (verl/workers/config/model.py:185).
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
]


# Passed on to Ray's workers when set: verl's file logger (verl/utils/tracking.py:534),
# the estimator probe (verlcpu.probe), the rollout's sampling seed, its frozen-weights
# switch and its cap on tokens a generate call (verlcpu.server).
PASSTHROUGH = (
    "VERL_FILE_LOGGER_PATH",
    "VERLCPU_PROBE_FILE",
    "VERLCPU_SEED",
    "VERLCPU_FREEZE_ROLLOUT",
    "VERLCPU_TURN_TOKENS",
)

PACKAGE = os.path.dirname(os.path.abspath(__file__))
#: verl's tool config (``multi_turn.tool_config_path``): :class:`verlcpu.tools.CalcTool`.
TOOLS_CONFIG = os.path.join(PACKAGE, "tools.yaml")
#: verl's agent-loop config (``agent.agent_loop_config_path``): ``tool_agent_turns``.
AGENT_LOOPS_CONFIG = os.path.join(PACKAGE, "agent_loops.yaml")


def env() -> dict[str, str]:
    """The environment variables a CPU run needs (add to ``os.environ``)."""
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = [HERE, *(p for p in paths if p != HERE)]
    passed = {key: os.environ[key] for key in PASSTHROUGH if os.environ.get(key)}
    return {**ENV, **passed, "PYTHONPATH": os.pathsep.join(paths)}


def overrides(n_gpus: int = 1, extra_env: dict[str, str] | None = None) -> list[str]:
    """Hydra overrides of a CPU run on ``n_gpus`` fake GPUs (FSDP ranks), with the
    environment of :func:`env` (and ``extra_env``) passed to Ray's workers."""
    items = [
        *OVERRIDES,
        f"trainer.n_gpus_per_node={n_gpus}",
        # fake GPUs: verl/single_controller/ray/base.py:146-148 builds GPU bundles
        f"++ray_kwargs.ray_init.num_gpus={n_gpus}",
    ]
    for key, value in {**env(), **(extra_env or {})}.items():
        items.append(f"++ray_kwargs.ray_init.runtime_env.env_vars.{key}='{value}'")
    return items


def multi_turn_overrides(loop: str = "tool_agent", assistant_turns: int = 3) -> list[str]:
    """Hydra overrides of a multi-turn run: verl's agent loop ``loop`` (``tool_agent``:
    verl's ToolAgentLoop, one row per trajectory; ``tool_agent_turns``: one row per
    assistant turn, :class:`verlcpu.tools.TurnSplitAgentLoop`) with the harness's
    calculator, called after every turn (:class:`verlcpu.tools.AlwaysCalcParser`), up to
    ``assistant_turns`` turns. Set ``VERLCPU_TURN_TOKENS`` too, so that they fit in the
    response length."""
    rollout = "actor_rollout_ref.rollout"
    return [
        f"{rollout}.multi_turn.enable=True",
        f"{rollout}.multi_turn.format=verlcpu_calc",
        f"{rollout}.multi_turn.max_assistant_turns={assistant_turns}",
        f"{rollout}.multi_turn.tool_config_path={TOOLS_CONFIG}",
        f"{rollout}.agent.agent_loop_config_path={AGENT_LOOPS_CONFIG}",
        f"{rollout}.agent.default_agent_loop={loop}",
        "data.return_raw_chat=True",  # the agent loop reads the chat messages
    ]
