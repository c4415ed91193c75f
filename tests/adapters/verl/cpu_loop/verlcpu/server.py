"""The ``hfcpu`` rollout server: a Ray actor that generates with a Hugging Face forward
loop (KV cache, temperature/top-p/top-k sampling, per-token log-probs) and answers verl's
token-in-token-out protocol (``generate`` -> ``TokenOutput``, verl/workers/rollout/
llm_server.py:150) plus the replica's control calls (no-ops: nothing to free on CPU).
``VERLCPU_TURN_TOKENS=N`` caps each generate call at N tokens: verl's multi-turn agent
loops call it once per assistant turn, so several turns fit in a short response.

verl is imported lazily (inside methods): this module is the first one the server's
fresh Ray process imports, and ``import verl`` at its top would re-enter verlcpu through
``VERL_USE_EXTERNAL_MODULES`` half-initialised (the circular import that costs
advbudget's metrics trainers their registration in that process).
"""

from __future__ import annotations

import os
from typing import Any


class HFCPUServer:
    """One rollout replica's server. ``load_weights`` takes the actor's weights (pushed by
    :class:`verlcpu.rollout.HFCPURollout` every ``update_weights``) and counts versions."""

    def __init__(self, model_path: str, prompt_length: int, response_length: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, torch_dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos = {int(i) for i in [*eos, tokenizer.eos_token_id] if i is not None}
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.version = 0  # weight pushes received
        self.global_steps = 0  # verl's step of the weights in use
        self.generator = torch.Generator().manual_seed(int(os.environ.get("VERLCPU_SEED", "0")))
        # VERLCPU_TURN_TOKENS=N: at most N tokens a generate call (0 or unset: no cap).
        self.turn_tokens = int(os.environ.get("VERLCPU_TURN_TOKENS") or 0)

    async def ready(self) -> bool:
        return True

    async def weight_version(self) -> tuple[int, int]:
        return self.version, self.global_steps

    async def load_weights(self, state: dict[str, Any], global_steps: int | None) -> int:
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise KeyError(f"hfcpu: weights the model does not have: {unknown[:5]}")
        # VERLCPU_FREEZE_ROLLOUT=1 drops the weights (versions still count): a broken weight
        # sync, to check that the loop tests notice (rollout_probs_diff_max).
        if os.environ.get("VERLCPU_FREEZE_ROLLOUT") != "1":
            self.model.load_state_dict(state, strict=False)
        self.version += 1
        if global_steps is not None:
            self.global_steps = int(global_steps)
        print(
            f"[verlcpu] hfcpu server loaded {len(state)} tensors: weight version "
            f"{self.version}, global_steps {self.global_steps}",
            flush=True,
        )
        return self.version

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        params = dict(sampling_params)
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if max_tokens is None:  # as verl's vLLM server (vllm_async_server.py:601)
            max_tokens = min(
                self.response_length, self.prompt_length + self.response_length - len(prompt_ids)
            )
        if self.turn_tokens:  # one call is one assistant turn: several fit in a response
            max_tokens = min(int(max_tokens), self.turn_tokens)
        tokens, log_probs = self._generate(
            prompt_ids,
            max(1, int(max_tokens)),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=int(params.get("top_k", -1)),
        )
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs if params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def _generate(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        *,
        temperature: float,
        top_p: float,
        top_k: int,
    ) -> tuple[list[int], list[float]]:
        import torch

        tokens: list[int] = []
        log_probs: list[float] = []
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
            for _ in range(max_tokens):
                logits = out.logits[0, -1].float()
                if temperature > 0:
                    logits = logits / temperature
                logp = torch.log_softmax(logits, dim=-1)
                if temperature <= 0:
                    token = int(torch.argmax(logp))
                else:
                    token = self._sample(logp, top_p, top_k)
                tokens.append(token)
                log_probs.append(float(logp[token]))
                if token in self.eos:
                    break
                out = self.model(
                    input_ids=torch.tensor([[token]]),
                    past_key_values=out.past_key_values,
                    use_cache=True,
                )
        return tokens, log_probs

    def _sample(self, logp: Any, top_p: float, top_k: int) -> int:
        import torch

        probs = logp.exp()
        if 0 < top_k < probs.numel():
            cutoff = torch.topk(probs, top_k).values[-1]
            probs = torch.where(probs >= cutoff, probs, torch.zeros_like(probs))
        if top_p < 1.0:
            ordered, index = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, 0) - ordered < top_p * ordered.sum()
            probs = torch.zeros_like(probs).scatter(0, index[keep], ordered[keep])
        return int(torch.multinomial(probs / probs.sum(), 1, generator=self.generator))

    # The replica's control calls (verl/workers/rollout/replica.py:263-305): no-ops on CPU.
    async def wake_up(self) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = int(global_steps)
