"""SkyRL 0.4.0's experiment on CPU, run through advbudget's entry point (tests only).

``python -m skyrl_cpu_loop <SkyRL overrides>`` calls ``advbudget.adapters.skyrl.main`` with
:class:`CpuLoopExp`, a subclass of advbudget's ``AdvBudgetPPOExp`` that replaces what needs
a GPU (``../sitecustomize.py`` patches the rest in every process):

- the inference engine (vLLM HTTP servers behind ``vllm-router``,
  ``train/entrypoints/main_base.py:210-240``): :class:`CpuInferenceClient` in front of
  :class:`InferenceServer`, a Ray actor sampling from the policy with transformers;
- the weight sync (vLLM's transfer engine over nccl, ``weight_sync/weight_senders.py:27-28``,
  built at ``workers/worker.py:493``): :class:`CpuPolicyWorker` sends the policy's full state
  dict to that actor after every update;
- the dataset's 8 filter processes (``main_base.py:78-83``): one, in this process.

The reward comes from :class:`ParityEnv` (``environment.env_class=advbudget_parity``): a
tiny random model fails every DAPO problem, so every group would tie and be skipped.
:class:`ParityTurnsEnv` (``advbudget_parity_turns``, chosen by ``CPU_LOOP_ENV``, see
``../cpu_overrides.py``) is its multi-turn form, for step-wise trajectories.

``ADVBUDGET_CPU_LOOP_PROBE=FILE``: the server appends ``weights <version> <sha1>`` for each
state dict it loads (version 0: the sync before the first step).
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Sequence
from typing import Any

import ray
import torch
from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface
from skyrl.backends.skyrl_train.workers.fsdp import fsdp_worker
from skyrl.train.dataset import PromptDataset
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register, registry

from advbudget.adapters.skyrl import AdvBudgetPPOExp
from advbudget.adapters.skyrl import main as advbudget_main

ENV_CLASS = "advbudget_parity"
TURNS_ENV_CLASS = "advbudget_parity_turns"  # ParityTurnsEnv, for step-wise trajectories
MAX_TURNS = 3
PROBE = "ADVBUDGET_CPU_LOOP_PROBE"


class ParityEnv(BaseTextEnv):  # type: ignore[misc]
    """One step: reward 1.0 when the CRC-32 of the response is even, else 0.0. It varies
    within a group and is the same for the same text."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()

    def step(self, action: str) -> BaseTextEnvStepOutput:
        reward = 1.0 if zlib.crc32(action.encode()) % 2 == 0 else 0.0
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})


class ParityTurnsEnv(BaseTextEnv):  # type: ignore[misc]
    """Up to :data:`MAX_TURNS` turns: after a response whose CRC-32 is not a multiple of 3 the
    environment answers "Go on." (reward 0) and the model speaks again; the last turn's
    reward is 1.0 when the CRC-32 of the whole conversation's responses is even, else 0.0.
    Trajectories of one prompt end after different numbers of turns, and rewards vary."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.responses: list[str] = []

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.responses.append(action)
        if len(self.responses) < MAX_TURNS and zlib.crc32(action.encode()) % 3:
            observations = [{"role": "user", "content": "Go on."}]
            return BaseTextEnvStepOutput(
                observations=observations, reward=0.0, done=False, metadata={}
            )
        whole = zlib.crc32("".join(self.responses).encode())
        reward = 1.0 if whole % 2 == 0 else 0.0
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})


for env_class, env in ((ENV_CLASS, ParityEnv), (TURNS_ENV_CLASS, ParityTurnsEnv)):
    if env_class not in registry:  # each process that imports this module (driver, trainer)
        register(id=env_class, entry_point=f"{__name__}:{env.__name__}")


class InferenceServer:
    """The rollout engine: the policy's weights as last synced, sampled token by token with a
    KV cache; the response's log-probs as vLLM reports them (``logprobs=1``)."""

    def __init__(self, model_path: str, seed: int) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.random = torch.Generator().manual_seed(seed)
        self.version = 0

    def generate(self, prompts: Sequence[Sequence[int]], params: dict[str, Any]) -> dict[str, Any]:
        max_tokens, temperature = int(params["max_tokens"]), float(params["temperature"])
        samples = [self._sample(prompt, max_tokens, temperature) for prompt in prompts]
        return {
            "responses": [
                self.tokenizer.decode(ids, skip_special_tokens=True) for ids, _, _ in samples
            ],
            "response_ids": [ids for ids, _, _ in samples],
            "stop_reasons": [reason for _, _, reason in samples],
            "response_logprobs": [logprobs for _, logprobs, _ in samples],
        }

    @torch.no_grad()
    def _sample(
        self, prompt: Sequence[int], max_tokens: int, temperature: float
    ) -> tuple[list[int], list[float], str]:
        output = self.model(input_ids=torch.tensor([list(prompt)]), use_cache=True)
        ids: list[int] = []
        logprobs: list[float] = []
        for _ in range(max_tokens):
            logp = torch.log_softmax(output.logits[0, -1].float() / temperature, dim=-1)
            token = int(torch.multinomial(logp.exp(), 1, generator=self.random))
            ids.append(token)
            logprobs.append(float(logp[token]))
            if token == self.tokenizer.eos_token_id:
                return ids, logprobs, "stop"  # vLLM keeps the EOS token, as here
            output = self.model(
                input_ids=torch.tensor([[token]]),
                past_key_values=output.past_key_values,
                use_cache=True,
            )
        return ids, logprobs, "length"

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state, strict=True)
        digest = hashlib.sha1()
        for name in sorted(state):
            digest.update(name.encode())
            digest.update(state[name].contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        if os.environ.get(PROBE):
            with open(os.environ[PROBE], "a", encoding="utf-8") as out:
                out.write(f"weights {self.version} {digest.hexdigest()}\n")
        self.version += 1


class CpuInferenceClient(InferenceEngineInterface):  # type: ignore[misc]
    """What SkyRL's trainer and generator ask of an inference client: generation (by the
    server), the weight-version count, and no-ops for sleep, wake-up and pauses (nothing to
    free or freeze: one actor, no requests in flight during a sync)."""

    def __init__(self, server: Any, model_name: str) -> None:
        self.server = server
        self._model_name = model_name
        self.weight_version = 0  # the generator's prefix-cache salt reads it

    @property
    def model_name(self) -> str:
        return self._model_name

    async def generate(self, input_batch: Any, model: str | None = None) -> Any:
        prompts = input_batch.get("prompt_token_ids")
        if prompts is None:
            raise NotImplementedError("the CPU loop generates from token ids")
        return await self.server.generate.remote(prompts, input_batch.get("sampling_params") or {})

    def increment_weight_version(self) -> None:
        self.weight_version += 1

    async def get_world_size(self) -> tuple[int, int]:
        return 1, 1

    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def pause_generation(self) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> None:
        return None

    async def finish_session(self, session_id: str) -> None:
        return None

    async def teardown(self) -> None:
        return None

    def get_endpoint_url(self) -> str:
        raise NotImplementedError("the CPU loop's engine has no HTTP endpoint")

    async def chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("the CPU loop's engine has no HTTP endpoint")

    async def render_chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("the CPU loop's engine has no HTTP endpoint")

    async def completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("the CPU loop's engine has no HTTP endpoint")

    async def update_named_weights(self, request: Any) -> None:
        raise NotImplementedError("CpuPolicyWorker sends the weights to the server itself")

    async def load_lora_adapter(self, lora_name: str, lora_path: str) -> dict[str, Any]:
        raise NotImplementedError("no LoRA in the CPU loop")


class CpuPolicyWorker(fsdp_worker.FSDPPolicyWorkerBase):  # type: ignore[misc]
    """SkyRL's FSDP policy worker with the weight sync to :class:`InferenceServer`."""

    async def init_weight_sync_state(self, inference_engine_client: Any, cfg: Any) -> None:
        self._cpu_loop_server = inference_engine_client.server
        torch.distributed.barrier()

    async def broadcast_to_inference_engines(
        self, inference_engine_client: Any, cfg: Any, model_id: str | None = None
    ) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model.model, options=options)  # every rank gathers
        if torch.distributed.get_rank() == 0:
            await self._cpu_loop_server.load_weights.remote(state)
        torch.distributed.barrier()


class CpuLoopExp(AdvBudgetPPOExp):  # type: ignore[misc]
    """advbudget's experiment with the replacements of the module docstring."""

    def __init__(self, cfg: Any) -> None:
        # main_base.py:262-267 imports PolicyWorker from this module when it builds the trainer.
        fsdp_worker.PolicyWorker = ray.remote(num_gpus=1)(CpuPolicyWorker)
        super().__init__(cfg)

    def get_train_dataset(self) -> PromptDataset:
        return PromptDataset(
            datasets=self.cfg.data.train_data,
            tokenizer=self.tokenizer,
            max_prompt_length=self.cfg.trainer.max_prompt_length,
            num_workers=1,
        )

    def get_inference_client(self) -> CpuInferenceClient:
        path = self.cfg.trainer.policy.model.path
        # An actor of the trainer's task (it dies with it); no CPU slot: it idles between steps.
        server = ray.remote(num_cpus=0)(InferenceServer).remote(path, self.cfg.trainer.seed)
        return CpuInferenceClient(server, path)


def main(argv: Sequence[str]) -> None:
    advbudget_main(list(argv), experiment=CpuLoopExp)
