"""The CPU pieces verl 0.9.1 lacks, installed at ``import verl`` in every process.

List this module FIRST in ``VERL_USE_EXTERNAL_MODULES`` (``verl/__init__.py:49`` imports
those modules before the entry-point plugins): advbudget's ``register_trainers()`` resolves
verl's platform, which must exist by then. Each workaround names the verl 0.9.1 line it
answers; nothing of verl is patched on disk.
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator
from typing import Any

import torch
import verl  # half-initialised when imported from verl/__init__.py: __version__ is set

from verlcpu import VERL_VERSION

if verl.__version__ != VERL_VERSION:
    raise RuntimeError(
        f"verlcpu supports verl {VERL_VERSION} only (it uses private names of that release); "
        f"found verl {verl.__version__}"
    )

from verl.plugin.platform import platform_manager
from verl.plugin.platform.platform_base import PlatformBase


class _DeviceModule(types.ModuleType):
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes on its device module
    (``get_torch_device()``): memory statistics are 0, cache and peak resets are no-ops.

    verl/utils/flops_counter.py:80 (``get_device_name``), verl/utils/memory_utils.py and
    verl/utils/profiler (``memory_allocated``, ``mem_get_info``, ...), the checkpoint
    managers (``get_rng_state``/``set_rng_state``).
    """

    def __init__(self) -> None:
        super().__init__("verlcpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def get_device_name(*_: Any) -> str:
        return "CPU"

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def set_device(*_: Any) -> None:
        return None

    @staticmethod
    def synchronize(*_: Any) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(*_: Any) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, *_: Any) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def mem_get_info(*_: Any) -> tuple[int, int]:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        free = os.sysconf("SC_AVPHYS_PAGES") * size
        return free, pages * size

    @staticmethod
    def _zero(*_: Any, **__: Any) -> int:
        return 0

    memory_allocated = memory_reserved = max_memory_allocated = max_memory_reserved = _zero
    reset_peak_memory_stats = reset_max_memory_allocated = ipc_collect = _zero

    @staticmethod
    def memory_stats(*_: Any) -> dict[str, int]:
        return {}


DEVICE = _DeviceModule()


@platform_manager.PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl/plugin/platform/platform_manager.py:114 falls back to ``nvidia`` (device
    ``cuda``, backend ``nccl``) when no accelerator answers; ``VERL_PLATFORM=cpu`` picks
    this one. Ray's resource stays ``GPU`` (fake GPUs: ``ray_init.num_gpus``) because
    verl/single_controller/ray/base.py:146-148 builds GPU bundles."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"

    def current_device(self) -> Any:
        # verl passes get_device_id() as a device (model.to(device=0) at
        # verl/utils/fsdp_utils.py:507, ~45 call sites): "cpu" instead of 0 keeps it there.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _use_cpu_platform() -> None:
    """Make ``cpu`` the platform even if something resolved verl's platform first."""
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != "cpu":
        return
    current = platform_manager._current_platform
    if current is not None and not isinstance(current, PlatformCPU):
        platform_manager.set_platform(PlatformCPU())


def _patch_init_process_group() -> None:
    """verl/utils/distributed.py:89 builds ``f"cpu:gloo,{device}:{backend}"``, i.e.
    ``cpu:gloo,cpu:gloo`` here: torch refuses the duplicate device type. Use ``gloo``."""
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_verlcpu", False):
        return

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend")
        if isinstance(backend, str) and backend.replace(" ", "") == "cpu:gloo,cpu:gloo":
            kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    init_process_group._verlcpu = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


def _patch_cpu_offload_policy() -> None:
    """verl/workers/engine/fsdp/transformer_impl.py:462 gives the (forward-only) ref model
    ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an accelerator. Force False."""
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy
    except ImportError:  # pragma: no cover (torch < 2.6)
        return
    original = CPUOffloadPolicy.__init__
    if getattr(original, "_verlcpu", False):
        return

    def __init__(self: Any, pin_memory: bool = True) -> None:  # its one field
        original(self, pin_memory=False)

    __init__._verlcpu = True  # type: ignore[attr-defined]
    CPUOffloadPolicy.__init__ = __init__  # type: ignore[method-assign]


def _register_rollout() -> None:
    """verl 0.9.1 has no CPU rollout: verl/workers/rollout/base.py:89 ``_ROLLOUT_REGISTRY``
    knows vllm/sglang/trtllm only, and both trainers generate through
    ``RolloutReplicaRegistry`` (verl/workers/rollout/llm_server.py:472). Register ``hfcpu``
    in both (``actor_rollout_ref.rollout.name=hfcpu``)."""
    from verl.workers.rollout import base, replica

    base._ROLLOUT_REGISTRY[("hfcpu", "async")] = "verlcpu.rollout.HFCPURollout"

    def load() -> type:
        from verlcpu.rollout import HFCPUReplica

        return HFCPUReplica

    replica.RolloutReplicaRegistry.register("hfcpu", load)


if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")  # verl/workers/engine/base.py:405
    _use_cpu_platform()
    _patch_init_process_group()
    _patch_cpu_offload_policy()
_register_rollout()
try:  # the async trainers' weight sync: verl's own engines need NCCL or one process
    import verlcpu.ckpt_engine  # noqa: F401
except ImportError as error:  # pragma: no cover (a verl without checkpoint engines)
    print(f"[verlcpu] hfcpu checkpoint engine not registered: {error!r}", flush=True)
