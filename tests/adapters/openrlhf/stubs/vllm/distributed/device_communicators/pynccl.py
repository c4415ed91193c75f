"""Stand-in: vLLM's ``PyNcclCommunicator`` over the gloo group of ``StatelessProcessGroup``
(OpenRLHF broadcasts every parameter through it: ppo_actor.py:436, vllm_worker_wrap.py:45)."""

from __future__ import annotations

from typing import Any


class PyNcclCommunicator:
    def __init__(self, group: Any, device: Any = None) -> None:
        self.group = group.group
        self.rank = group.rank
        self.world_size = group.world_size

    def broadcast(self, tensor: Any, src: int, stream: Any = None) -> None:
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = src
        self.group.broadcast([tensor], options).wait()
