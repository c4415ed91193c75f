"""A CPU stand-in for vllm, for OpenRLHF 0.11.2 in tests (never on a GPU machine).

Two uses. Imported only, it lets OpenRLHF's trainer modules import on a CPU machine
(``trainer/ray/vllm_engine.py:7``, ``trainer/ppo_utils/samples_generator.py:7``). Run, it is
the inside of OpenRLHF's own ``RolloutRayActor`` in the CPU loop (``../../cpu_loop``):
``AsyncLLMEngine`` generates with transformers' ``generate`` on the model path and takes
weight updates through OpenRLHF's ``WorkerWrap.init_process_group`` over a gloo group
(``distributed/``). Everything around the engine stays OpenRLHF's: ``create_vllm_engines``,
``RolloutRayActor``, the agent executor and reward file, ``SamplesGenerator``,
``broadcast_to_vllm``.

Not modelled: log-probs (``SamplingParams.logprobs`` is ignored, so OpenRLHF's
``rollout_log_probs`` / importance-sampling correction do not run), batching, tensor
parallelism, sleep mode (no-ops), CUDA-IPC weight sync.

When ``ADVBUDGET_CPU_LOOP_PROBE`` names a file, every completed weight sync appends
``weights <pid> <version> <sha1 of the parameters>`` to it (version 0: as loaded), and every
sample generated ``generated <pid> <version of the weights it was generated with>``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import AsyncIterator
from typing import Any

# OpenRLHF asserts > 0.8.5 (vllm_engine.py:92) and, with --vllm.sync_backend nccl, reads it
# again (ppo_actor.py:508); the CPU loop syncs over gloo.
__version__ = "0.17.0+cpu.stub"


@dataclasses.dataclass
class SamplingParams:
    """The fields OpenRLHF sets (samples_generator.py:199) and the agent reads."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = 16
    min_tokens: int = 0
    skip_special_tokens: bool = True
    logprobs: int | None = None
    n: int = 1
    seed: int | None = None


class AsyncEngineArgs:
    """The keyword arguments of ``create_vllm_engines`` (vllm_engine.py:261), kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.model: str = kwargs["model"]
        self.seed: int = int(kwargs.get("seed") or 0)
        self.dtype: str = kwargs.get("dtype") or "bfloat16"
        self.kwargs = kwargs


@dataclasses.dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: Any = None


@dataclasses.dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


class _OutputProcessor:
    def get_num_unfinished_requests(self) -> int:
        return 0  # generate() runs each request to completion before it returns


def _record(line: str) -> None:
    probe = os.environ.get("ADVBUDGET_CPU_LOOP_PROBE")
    if probe:
        with open(probe, "a", encoding="utf-8") as out:
            out.write(line + "\n")


class _Worker:
    """vLLM's worker as OpenRLHF's ``WorkerWrap`` sees it (``device``, ``model_config``,
    ``model_runner.model.load_weights``); ``WorkerWrap`` is mixed in as vLLM's
    ``worker_extension_cls`` does."""

    def __init__(self, model: Any) -> None:
        import torch

        self.device = torch.device("cpu")
        self.model_config = dataclasses.make_dataclass("ModelConfig", ["dtype"])(model.dtype)
        self.model_runner = dataclasses.make_dataclass("ModelRunner", ["model"])(self)
        self.model = model
        self.version = 0
        self._received = 0
        _record(f"weights {os.getpid()} 0 {self.checksum()}")

    def load_weights(self, weights: list[tuple[str, Any]]) -> None:
        import torch

        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, weight in weights:
                params[name].copy_(weight)
        self._received += len(weights)
        if self._received == len(params):  # a full sync: one new version of the policy
            self._received = 0
            self.version += 1
            checksum = self.checksum()
            print(f"[vllm cpu stand-in] weights v{self.version} sha1 {checksum}", flush=True)
            _record(f"weights {os.getpid()} {self.version} {checksum}")

    def checksum(self) -> str:
        digest = hashlib.sha1()
        for name, param in sorted(self.model.named_parameters()):
            digest.update(name.encode())
            digest.update(param.detach().float().numpy().tobytes())
        return digest.hexdigest()


def _worker_class(extension: str | None) -> type:
    if not extension:
        return _Worker
    import importlib

    module, _, name = extension.rpartition(".")
    extension_class = getattr(importlib.import_module(module), name)

    class Worker(_CpuWeightUpdate, extension_class, _Worker):  # type: ignore[misc,valid-type]
        pass

    return Worker


class _CpuWeightUpdate:
    def update_weight(
        self: Any, name: str, dtype: Any, shape: Any, empty_cache: bool = False
    ) -> None:
        """OpenRLHF's ``WorkerWrap.update_weight`` on CPU: it allocates the buffer with
        ``device="cuda"`` (vllm_worker_wrap.py:40); the same broadcast into a CPU tensor."""
        import torch

        assert dtype == self.model_config.dtype, f"dtype {dtype} != {self.model_config.dtype}"
        weight = torch.empty(shape, dtype=dtype)
        self._model_update_group.broadcast(weight, src=0, stream=None)
        self.model_runner.model.load_weights(weights=[(name, weight)])


class AsyncLLMEngine:
    """transformers' ``generate`` behind vLLM's async engine surface."""

    def __init__(self, args: AsyncEngineArgs) -> None:
        import torch
        import torch.distributed as dist
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(args.seed)
        dtype = getattr(torch, args.dtype) if isinstance(args.dtype, str) else args.dtype
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
        model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(args.model)
        if not dist.is_initialized():
            # vLLM's worker has a default group; WorkerWrap.init_process_group asserts one
            # (vllm_worker_wrap.py:9) and takes its rank.
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        self.worker = _worker_class(args.kwargs.get("worker_extension_cls"))(model)
        self.output_processor = _OutputProcessor()

    @classmethod
    def from_engine_args(cls, args: AsyncEngineArgs) -> AsyncLLMEngine:
        return cls(args)

    async def generate(
        self, prompt: dict[str, Any], sampling_params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        import torch

        prompt_ids = list(prompt["prompt_token_ids"])
        model = self.worker.model
        eos = self.tokenizer.eos_token_id
        max_tokens = sampling_params.max_tokens or 16
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt_ids]),
                attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                do_sample=sampling_params.temperature > 0,
                temperature=sampling_params.temperature or None,
                top_p=sampling_params.top_p,
                top_k=sampling_params.top_k if sampling_params.top_k > 0 else None,
                max_new_tokens=max_tokens,
                min_new_tokens=min(sampling_params.min_tokens or 0, max_tokens),
                eos_token_id=eos,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        tokens = out[0, len(prompt_ids) :].tolist()
        if eos in tokens:  # vLLM stops at eos and keeps it
            tokens = tokens[: tokens.index(eos) + 1]
        finish = "stop" if tokens and tokens[-1] == eos else "length"
        text = self.tokenizer.decode(
            tokens, skip_special_tokens=sampling_params.skip_special_tokens
        )
        _record(f"generated {os.getpid()} {self.worker.version}")
        yield RequestOutput(request_id, prompt_ids, [CompletionOutput(tokens, text, finish)])

    async def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return [getattr(self.worker, method)(*args)]

    async def is_sleeping(self) -> bool:
        return False

    async def sleep(self, level: int = 1) -> None:
        pass

    async def wake_up(self, tags: list[str] | None = None) -> None:
        pass

    async def reset_prefix_cache(self) -> None:
        pass

    async def pause_generation(self, mode: str = "keep") -> None:
        pass

    async def resume_generation(self) -> None:
        pass


class LLM:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("vllm is a CPU test stand-in: only AsyncLLMEngine runs")
