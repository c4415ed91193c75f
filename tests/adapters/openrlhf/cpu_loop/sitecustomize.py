"""CPU loop harness for OpenRLHF 0.11.2 (tests only): the smallest set of patches that lets
OpenRLHF's real PPO loop run on a machine without a GPU.

Put this folder and ``../stubs`` (the vLLM stand-in and flash_attn import stub) on
PYTHONPATH: Python imports ``sitecustomize`` at start-up, in the driver and in every Ray
worker (workers inherit PYTHONPATH). It imports nothing heavy itself: a meta-path finder
patches each module below right after its first import, each patch commented with the
OpenRLHF / DeepSpeed line it answers. Run the loop with fake GPU resources for Ray
(``RAY_OVERRIDE_RESOURCES='{"GPU": 4}'``) and ``--vllm.sync_backend gloo``
``--ds.attn_implementation sdpa``, no ``--ds.packing_samples`` (flash-attn), no
``--train.colocate_all`` / sleep modes; see ``examples/openrlhf_qwen3.sh`` (``CPU_LOOP=1``).

``ADVBUDGET_CPU_LOOP_PROBE=FILE``: every call of the advbudget core estimator appends
``estimator <pid> <name>`` to FILE (the test checks it ran in the PPOTrainer actor); a call
of an estimator with memory also ``memory <pid> <name> <json>``: each sample's prompt, reward
and advantage (and spo's ρ under ``rho="kl"``), for a replay; a call with policy versions
``staleness <pid> <name> <json>``: each sample's version, the current one, its advantage and
whether it takes part in the update.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import os
import sys
import types
from collections.abc import Callable
from typing import Any

OPENRLHF_VERSION = "0.11.2"  # every patch below names a line of this version

# DeepSpeed's CPU accelerator over gloo: no CUDA, no oneCCL, no intel_extension_for_pytorch
# (deepspeed accelerator/real_accelerator.py:68, cpu_accelerator.py:15-34).
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _patch_torch(torch: Any) -> None:
    # deepspeed.py:97 set_device, distributed_util.py:10 synchronize (every barrier),
    # ppo_actor.py:436 current_stream (the weight broadcast), launcher.py:64 empty_cache.
    cuda = torch.cuda
    cuda.set_device = lambda device: None
    cuda.synchronize = lambda device=None: None
    cuda.current_stream = lambda device=None: None
    cuda.empty_cache = lambda: None
    # Used as a device: launcher.py:136,190, ppo_actor.py:148,171,627, replay_buffer.py:104,
    # 129,159,165, deepspeed.py:614,633 (and replay_buffer.py:40, below).
    cuda.current_device = lambda: "cpu"


def _patch_ray(ray: Any) -> None:
    # The driver's local cluster: a new one (its ports picked free), never another Ray on
    # the machine that ray.init would join; no dashboard (a process and seconds of CPU for
    # nothing).
    init = ray.init

    def cpu_init(*args: Any, **kwargs: Any) -> Any:
        if not args:
            kwargs.setdefault("address", "local")
        kwargs.setdefault("include_dashboard", False)
        return init(*args, **kwargs)

    ray.init = cpu_init


def _patch_deepspeed_comm(module: Any) -> None:
    # comm/torch.py:191: TorchBackend JIT-builds the shared-memory all-reduce op with g++
    # (minutes, on every fresh clone); gloo does the same collectives.
    module.build_shm_op = lambda: None


def _patch_deepspeed_engine(module: Any) -> None:
    # engine.py:2171: OpenRLHF's {"type": "AdamW"} (deepspeed.py:359) becomes DeepSpeed's
    # FusedAdam, JIT-built for CPU with g++ (minutes); torch's AdamW is the same update.
    engine = module.DeepSpeedEngine
    original = engine.get_optimizer_configuration

    def get_optimizer_configuration(self: Any, parameters: Any, *a: Any, **k: Any) -> Any:
        parameters["torch_adam"] = True
        return original(self, parameters, *a, **k)

    engine.get_optimizer_configuration = get_optimizer_configuration


def _patch_openrlhf_deepspeed(module: Any) -> None:
    # deepspeed.py:106: init_device_mesh("cuda", ...).
    init_device_mesh = module.init_device_mesh

    def cpu_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return init_device_mesh("cpu", *args, **kwargs)

    module.init_device_mesh = cpu_mesh


def _patch_replay_buffer(module: Any) -> None:
    # replay_buffer.py:40: torch.device(f"cuda:{torch.cuda.current_device()}").
    buffer = module.NaiveReplayBuffer
    original = buffer.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        import torch

        current_device = torch.cuda.current_device
        torch.cuda.current_device = lambda: 0  # only to build that device string
        try:
            original(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = current_device
        self.target_device = torch.device("cpu")

    buffer.__init__ = __init__


def _check_openrlhf(module: Any) -> None:
    version = importlib.metadata.version("openrlhf")
    if version != OPENRLHF_VERSION:
        raise ImportError(
            f"the advbudget CPU loop harness (tests/adapters/openrlhf/cpu_loop) patches "
            f"openrlhf {OPENRLHF_VERSION} line by line; found openrlhf {version}"
        )


def _probe_estimator(module: Any) -> None:
    probe = os.environ.get("ADVBUDGET_CPU_LOOP_PROBE")
    if not probe:
        return
    compute = module.compute_advantages  # advbudget's core, as the adapter calls it

    def compute_advantages(rewards: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        with open(probe, "a", encoding="utf-8") as out:
            out.write(f"estimator {os.getpid()} {name}\n")
        result = compute(rewards, name, *args, **kwargs)
        if "policy_versions" in kwargs:  # each sample's stamp, the weights' version
            import json

            call = {
                "versions": [int(v) for v in kwargs["policy_versions"]],
                "current": int(kwargs["current_version"]),
                "advantages": result.advantages.tolist(),
                "valid": result.valid.tolist(),
            }
            with open(probe, "a", encoding="utf-8") as out:
                out.write(f"staleness {os.getpid()} {name} {json.dumps(call)}\n")
        if "state" in kwargs:  # an estimator with memory: what a replay needs
            import json

            call = {
                "prompt_ids": [str(p) for p in kwargs["prompt_ids"]],
                "rewards": rewards.tolist(),
                "advantages": result.advantages.tolist(),
            }
            if "rho" in kwargs:  # spo's rho="kl": the forgetting of each sample
                call["rho"] = [float(r) for r in kwargs["rho"]]
            with open(probe, "a", encoding="utf-8") as out:
                out.write(f"memory {os.getpid()} {name} {json.dumps(call)}\n")
        return result

    module.compute_advantages = compute_advantages


_PATCHES: dict[str, Callable[[Any], None]] = {
    "torch": _patch_torch,
    "ray": _patch_ray,
    "deepspeed.comm.torch": _patch_deepspeed_comm,
    "deepspeed.runtime.engine": _patch_deepspeed_engine,
    "openrlhf": _check_openrlhf,
    "openrlhf.utils.deepspeed.deepspeed": _patch_openrlhf_deepspeed,
    "openrlhf.trainer.ppo_utils.replay_buffer": _patch_replay_buffer,
    "advbudget.adapters.openrlhf._estimators": _probe_estimator,
}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._busy: set[str] = set()  # other patching finders may ask us back

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _PATCHES or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _Loader(spec.loader, _PATCHES[fullname])
                    return spec
            return None
        finally:
            self._busy.discard(fullname)


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any, patch: Callable[[Any], None]) -> None:
        self.loader = loader
        self.patch = patch

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        self.patch(module)


sys.meta_path.insert(0, _PatchAfterImport())
