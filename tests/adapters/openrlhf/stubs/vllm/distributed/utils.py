"""Stand-in: vLLM's ``StatelessProcessGroup`` as a TCPStore plus a gloo group."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any


@dataclasses.dataclass
class StatelessProcessGroup:
    rank: int
    world_size: int
    store: Any
    group: Any

    @classmethod
    def create(
        cls, host: str, port: int, rank: int, world_size: int, store_timeout: int = 300
    ) -> StatelessProcessGroup:
        import torch.distributed as dist

        timeout = timedelta(seconds=store_timeout)
        store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)
        group = dist.ProcessGroupGloo(dist.PrefixStore("vllm-sync", store), rank, world_size)
        return cls(rank=rank, world_size=world_size, store=store, group=group)
