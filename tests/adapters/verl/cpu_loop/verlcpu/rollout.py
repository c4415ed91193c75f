"""The ``hfcpu`` rollout, both halves verl 0.9.1 asks for (registered by
:mod:`verlcpu.platform`):

- :class:`HFCPURollout`, the worker-side ``BaseRollout`` (built by the FSDP worker at
  verl/workers/engine_workers.py:667): ``update_weights`` collects the actor's tensors
  (every rank consumes the generator: FSDP gathers collectively) and the first rank of
  each replica sends them to its server;
- :class:`HFCPUReplica`, the trainer-side ``RolloutReplica`` (built by
  ``LLMServerManager``, verl/workers/rollout/llm_server.py:472): ``launch_servers`` starts
  one named :class:`verlcpu.server.HFCPUServer` actor. The load balancer only needs an
  address string.
"""

from __future__ import annotations

from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica


def server_name(replica_rank: int) -> str:
    return f"hfcpu_server_{replica_rank}"


class HFCPURollout(BaseRollout):
    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank, self.is_leader = rank // size, rank % size == 0

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self, weights: Any, wire_format: str = "named_tensors", **kwargs: Any
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"hfcpu rollout takes named_tensors only, not {wire_format!r}")
        state = {}
        items = [item async for item in weights] if hasattr(weights, "__aiter__") else weights
        for name, tensor in items:
            if hasattr(tensor, "full_tensor"):  # a DTensor shard: gather (all ranks)
                tensor = tensor.full_tensor()
            if self.is_leader:
                state[name] = tensor.detach().to("cpu", torch.float32, copy=True)
        if not self.is_leader:
            return
        server = ray.get_actor(server_name(self.replica_rank))
        version = await server.load_weights.remote(state, kwargs.get("global_steps"))
        print(
            f"[verlcpu] hfcpu rollout pushed {len(state)} tensors to "
            f"{server_name(self.replica_rank)} (weight version {version}, "
            f"global_steps {kwargs.get('global_steps')})",
            flush=True,
        )


class HFCPUReplica(RolloutReplica):
    async def launch_servers(self) -> None:
        from verlcpu.server import HFCPUServer

        model = self.model_config
        path = _get(model, "local_path") or _get(model, "path")
        name = server_name(self.replica_rank)
        server = (
            ray.remote(HFCPUServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(str(path), int(self.config.prompt_length), int(self.config.response_length))
        )
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hfcpu://{name}"


def _get(config: Any, key: str) -> Any:
    if isinstance(config, dict):
        return config.get(key)
    value = getattr(config, key, None)
    if value is None and hasattr(config, "get"):
        value = config.get(key)
    return value
