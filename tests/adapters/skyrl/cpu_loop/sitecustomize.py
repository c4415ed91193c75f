"""CPU loop harness for SkyRL 0.4.0 (tests only): the patches every process of the run needs.

Put this folder on PYTHONPATH: Python imports ``sitecustomize`` at start-up, in the driver
and in every local Ray worker (they inherit PYTHONPATH), so SkyRL's FSDP workers get the same
patches as the trainer. It imports nothing heavy itself: a meta-path finder patches each module
below right after its first import, each patch citing the SkyRL line (``skyrl/`` 0.4.0) it
answers. ``flash_attn/`` beside it is an import stub; ``skyrl_cpu_loop`` the experiment.

``ADVBUDGET_CPU_LOOP_PROBE=FILE``: every call of advbudget's core estimator made by the SkyRL
adapter appends ``estimator <pid> <core name>`` to FILE, and each step's batch after the
advantages ``batch <pid> <JSON>`` (:func:`_probe_batch`).
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import json
import os
import sys
import types
from collections.abc import Callable
from typing import Any

SKYRL_VERSION = "0.4.0"  # every patch below names a line of this version


def _patch_torch(torch: Any) -> None:
    cuda = torch.cuda
    # fsdp_strategy.py:102,109,132-133,146, fsdp_utils.py:53,78: device bookkeeping that
    # initialises CUDA ("Found no NVIDIA driver") on a machine without one.
    cuda.set_device = lambda device: None
    cuda.synchronize = lambda device=None: None
    cuda.empty_cache = lambda: None
    cuda.manual_seed_all = lambda seed: None
    # Used as a device: worker.py:1090,1384,1473, fsdp_utils.py:52,83,249, strategy.py:84,111.
    cuda.current_device = lambda: "cpu"
    # fsdp_utils.py:125: buf.detach().cuda() while loading the model's buffers.
    torch.Tensor.cuda = lambda self, *args, **kwargs: self

    # worker.py:124-125: backend="cpu:gloo,cuda:nccl" ("ProcessGroupNCCL is only supported
    # with GPUs, no GPUs found!"); gloo does every collective SkyRL runs here.
    distributed = torch.distributed
    init_process_group = distributed.init_process_group

    def gloo_init_process_group(*args: Any, **kwargs: Any) -> Any:
        kwargs["backend"] = "gloo"
        return init_process_group(*args, **kwargs)

    distributed.init_process_group = gloo_init_process_group

    # worker.py:134-135 and fsdp_utils.py:256-259 (which imports it by name, after this):
    # init_device_mesh("cuda", ...).
    device_mesh = distributed.device_mesh
    init_device_mesh = device_mesh.init_device_mesh

    def cpu_device_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return init_device_mesh("cpu", *args, **kwargs)

    device_mesh.init_device_mesh = cpu_device_mesh


def _patch_ray(ray: Any) -> None:
    # utils.py:1232 starts Ray with the machine's resources: no GPU for the policy and ref
    # workers (1 GPU and 1 CPU each with colocate_policy_ref=false, worker.py:841-845), and
    # on 2 cores no CPU for them beside the trainer's Ray task (1 CPU, as main_base.py:338).
    # Logical slots only. A local cluster of its own (never another Ray on the machine), no
    # dashboard (a process and seconds of CPU for nothing).
    init = ray.init

    def cpu_init(*args: Any, **kwargs: Any) -> Any:
        if not args:
            kwargs.setdefault("address", "local")
            kwargs.setdefault("num_gpus", 2)
            kwargs.setdefault("num_cpus", 4)
        kwargs.setdefault("include_dashboard", False)
        return init(*args, **kwargs)

    ray.init = cpu_init


def _check_skyrl(module: Any) -> None:
    version = importlib.metadata.version("skyrl")
    if version != SKYRL_VERSION:
        raise ImportError(
            f"the advbudget CPU loop harness (tests/adapters/skyrl/cpu_loop) patches skyrl "
            f"{SKYRL_VERSION} line by line; found skyrl {version}"
        )


def _probe_estimator(module: Any) -> None:
    probe = os.environ.get("ADVBUDGET_CPU_LOOP_PROBE")
    if not probe:
        return
    compute = module.compute_advantages  # advbudget's core, as the adapter calls it

    def compute_advantages(rewards: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        with open(probe, "a", encoding="utf-8") as out:
            out.write(f"estimator {os.getpid()} {name}\n")
        return compute(rewards, name, *args, **kwargs)

    module.compute_advantages = compute_advantages


def _probe_batch(module: Any) -> None:
    """Each step's batch after the advantages: per row, SkyRL's trajectory id (the generator's
    ``(instance_id, repetition_id)``), uid, ``is_last_step``, reward, the advantage on its
    first response token and the spread over its response tokens, its mask counts and, with
    ``rho=kl``, the ρ spo was given."""
    probe = os.environ.get("ADVBUDGET_CPU_LOOP_PROBE")
    if not probe:
        return
    trainer = module.AdvBudgetPPOTrainer
    convert, compute = trainer.convert_to_training_input, trainer.compute_advantages_and_returns
    forgetting = trainer._forgetting

    def _forgetting(self: Any, data: Any, prompts: Any) -> Any:
        rho, metrics = forgetting(self, data, prompts)
        self._probe_rho = None if rho is None else rho.tolist()
        return rho, metrics

    def convert_to_training_input(self: Any, generator_output: Any, uids: Any) -> Any:
        ids = generator_output.get("trajectory_ids")
        self._probe_trajectories = ids and [[t.instance_id, t.repetition_id] for t in ids]
        return convert(self, generator_output, uids)

    def compute_advantages_and_returns(self: Any, data: Any) -> Any:
        data = compute(self, data)
        mask = data["response_mask"].bool()
        on_mask = [row[keep] for row, keep in zip(data["advantages"].double(), mask, strict=True)]
        record = {
            "step": self.global_step,
            "trajectories": getattr(self, "_probe_trajectories", None),
            "uids": list(data.metadata["uids"]),
            "is_last_step": data.metadata.get("is_last_step"),
            "rewards": data["rewards"].double().sum(dim=1).tolist(),
            "advantages": [row[0].item() if len(row) else None for row in on_mask],
            "spread": [(row.max() - row.min()).item() if len(row) else 0.0 for row in on_mask],
            "response_tokens": mask.sum(dim=1).tolist(),
            "loss_tokens": data["loss_mask"].sum(dim=1).tolist(),
            "rho": getattr(self, "_probe_rho", None),  # spo's measured ρ per row (rho=kl)
        }
        with open(probe, "a", encoding="utf-8") as out:
            out.write(f"batch {os.getpid()} {json.dumps(record)}\n")
        return data

    trainer.convert_to_training_input = convert_to_training_input
    trainer.compute_advantages_and_returns = compute_advantages_and_returns
    trainer._forgetting = _forgetting


_PATCHES: dict[str, Callable[[Any], None]] = {
    "torch": _patch_torch,
    "ray": _patch_ray,
    "skyrl": _check_skyrl,
    "advbudget.adapters.skyrl._estimators": _probe_estimator,
    "advbudget.adapters.skyrl._trainer": _probe_batch,
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
