"""``hfcpu``: a CPU checkpoint engine for verl's async trainers
(``actor_rollout_ref.rollout.checkpoint_engine.backend=hfcpu``).

verl's async trainers (``fully_async_policy``, ``one_step_off_policy``) run the actor and
the rollout in separate worker groups and send the weights through a checkpoint engine
(``verl/checkpoint_engine/base.py``); their configs default to ``nccl``, and ``naive``
works only where both live in one process. Here the actor's master rank puts the whole
state dict into a named Ray actor (the mailbox) under the trainer's label
(``global_steps``); each rollout-side ``CheckpointEngineWorker`` waits for that label and
yields the tensors to its server adapter (:class:`verlcpu.rollout.HFCPURollout`), which
loads them into the HF server. One copy a sync through Ray's object store: fine for a tiny
model.

Registered on import (:mod:`verlcpu.platform` imports it in every process of a CPU run).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

MAILBOX = "verlcpu_weight_mailbox"
POLL_S = 0.05
WAIT_S = 300.0  # a sync the rollout waits for longer than this is a failed run


class _Mailbox:
    """The latest weights sent, their label and a sequence number (a receiver takes each
    send once)."""

    def __init__(self) -> None:
        self.sequence = 0
        self.label: int | None = None
        self.state: dict[str, torch.Tensor] = {}

    def put(self, label: int | None, state: dict[str, torch.Tensor]) -> int:
        self.label, self.state = label, state
        self.sequence += 1
        return self.sequence

    def get(self) -> tuple[int, int | None, dict[str, torch.Tensor]]:
        return self.sequence, self.label, self.state


def _mailbox() -> Any:
    # Detached: it must outlive whichever process first asks for it (actor or rollout
    # side); a CPU run has a Ray cluster of its own, which takes it down at the end.
    return (
        ray.remote(_Mailbox)
        .options(name=MAILBOX, get_if_exists=True, num_cpus=0, lifetime="detached")
        .remote()
    )


@CheckpointEngineRegistry.register("hfcpu")
class HFCPUCheckpointEngine(CheckpointEngine):
    """Sender (actor ranks; the master puts) and receiver (rollout ranks) of the weights."""

    def __init__(self, bucket_size: int = 0, is_master: bool = False, **kwargs: Any) -> None:
        self.is_master = is_master
        self.seen = 0  # receiver: the last mailbox sequence taken

    def prepare(self) -> dict[str, Any]:
        return {}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict[str, Any]]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        return {"rank": list(range(actor_wg_world_size))}, {"rank": list(range(rollout_world_size))}

    def init_process_group(self, rank: int = 0, **kwargs: Any) -> None:
        self.rank = rank  # no process group: the mailbox is the channel

    def finalize(self) -> None:
        return None

    async def send_weights(self, weights: Any, global_steps: int | None = None) -> dict[str, Any]:
        # Every rank iterates (full_tensor() of a sharded weight is a collective); the
        # master keeps a float32 CPU copy.
        state: dict[str, torch.Tensor] = {}
        items: Iterable[tuple[str, Any]] = (
            [item async for item in weights] if hasattr(weights, "__aiter__") else weights
        )
        for name, tensor in items:
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            if self.is_master:
                state[name] = tensor.detach().to("cpu", torch.float32, copy=True)
        if self.is_master:
            sequence = await _mailbox().put.remote(global_steps, state)
            print(
                f"[verlcpu] hfcpu checkpoint engine: sent {len(state)} tensors "
                f"(label {global_steps}, send {sequence})",
                flush=True,
            )
        return {}

    async def receive_weights(
        self, global_steps: int | None = None
    ) -> AsyncIterator[tuple[str, torch.Tensor]]:
        box = _mailbox()
        for _ in range(int(WAIT_S / POLL_S)):
            sequence, label, state = await box.get.remote()
            if sequence != self.seen and (global_steps is None or label == global_steps):
                self.seen = sequence
                for item in state.items():
                    yield item
                return
            await asyncio.sleep(POLL_S)
        raise TimeoutError(
            f"hfcpu checkpoint engine: no weights labelled {global_steps} in {WAIT_S:.0f} s"
        )
