"""Sampling answers from a model: vLLM on GPUs, transformers ``generate`` on a CPU.

Both backends turn each problem into the same chat prompt (the DAPO template the model
was trained with, through the tokenizer's chat template) and return ``n`` completions per
prompt. Frameworks are imported only when a generator is built.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

Backend = Literal["auto", "vllm", "transformers"]
Progress = Callable[[int], None]


class Generator(Protocol):
    """Samples ``n`` completions for each chat prompt.

    :func:`~advbudget.lab.eval.evaluate` passes ``seed`` (one per chunk of prompts, so that a
    resumed run samples what an uninterrupted one would) when ``generate`` takes it, and
    sends prompts in chunks of the generator's ``chunk_size`` (or ``batch_size``)
    attribute when it has one, writing each chunk's results before the next.
    """

    def generate(
        self,
        messages: Sequence[list[dict[str, str]]],
        *,
        n: int,
        temperature: float,
        max_new_tokens: int,
        on_progress: Progress | None = None,
        seed: int | None = None,
    ) -> list[list[str]]: ...


def chat_text(
    tokenizer: Any, messages: list[dict[str, str]], template_kwargs: dict[str, Any]
) -> str:
    """The prompt string a chat model sees (plain text when it has no chat template)."""
    if getattr(tokenizer, "chat_template", None):
        text: str = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **template_kwargs
        )
        return text
    return "\n\n".join(message["content"] for message in messages) + "\n\n"


class TransformersGenerator:
    """``model.generate`` with sampling: slow, but runs anywhere (CPU tests, smoke runs)."""

    def __init__(
        self,
        model: str,
        *,
        seed: int = 0,
        batch_size: int = 8,
        dtype: str = "auto",
        device: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        # Decoder-only models continue from the right end: pad on the left.
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(self.device)
        self.model.eval()
        self.seed, self.batch_size = seed, batch_size
        self.chunk_size = batch_size  # one batch per call: a resumed run redoes whole ones
        self.template_kwargs = chat_template_kwargs or {}

    def generate(
        self,
        messages: Sequence[list[dict[str, str]]],
        *,
        n: int,
        temperature: float,
        max_new_tokens: int,
        on_progress: Progress | None = None,
        seed: int | None = None,
    ) -> list[list[str]]:
        self.torch.manual_seed(self.seed if seed is None else seed)
        prompts = [chat_text(self.tokenizer, m, self.template_kwargs) for m in messages]
        sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0}
        if temperature == 0:
            sampling = {"do_sample": False}
        completions: list[list[str]] = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start : start + self.batch_size]
            inputs = self.tokenizer(batch, return_tensors="pt", padding=True).to(self.device)
            with self.torch.no_grad():
                output = self.model.generate(
                    **inputs,
                    **sampling,
                    max_new_tokens=max_new_tokens,
                    num_return_sequences=n,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            new_tokens = output[:, inputs["input_ids"].shape[1] :]
            texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            completions += [texts[i * n : (i + 1) * n] for i in range(len(batch))]
            if on_progress is not None:
                on_progress(len(batch))
        return completions


class VLLMGenerator:
    """vLLM offline inference: the paper's setting (8 samples, temperature 0.7, 8192 tokens)."""

    def __init__(
        self,
        model: str,
        *,
        seed: int = 0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        chunk_size: int = 64,
    ):
        from vllm import LLM

        self.llm = LLM(
            model=model,
            seed=seed,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.seed = seed
        # Prompts per generate call from evaluate: enough to keep the GPU busy, few enough
        # that a crash loses little (each chunk's problems are written when it ends).
        self.chunk_size = chunk_size
        self.template_kwargs = chat_template_kwargs or {}

    def generate(
        self,
        messages: Sequence[list[dict[str, str]]],
        *,
        n: int,
        temperature: float,
        max_new_tokens: int,
        on_progress: Progress | None = None,
        seed: int | None = None,
    ) -> list[list[str]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=n,
            temperature=temperature,
            top_p=1.0,
            max_tokens=max_new_tokens,
            seed=self.seed if seed is None else seed,
        )
        prompts = [chat_text(self.tokenizer, m, self.template_kwargs) for m in messages]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        if on_progress is not None:
            on_progress(len(prompts))
        return [[choice.text for choice in output.outputs] for output in outputs]


def make_generator(backend: Backend, model: str, **options: Any) -> Generator:
    """A generator for ``model``: ``"auto"`` takes vLLM when it is installed and a GPU is
    visible, else transformers."""
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"backend: expected 'auto', 'vllm' or 'transformers', got {backend!r}")
    if backend == "auto":
        backend = "vllm" if _vllm_usable() else "transformers"
    if backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ImportError("backend: 'vllm' needs vLLM installed (pip install vllm)")
        vllm_options = {k: v for k, v in options.items() if k not in ("batch_size", "dtype")}
        return VLLMGenerator(model, **vllm_options)
    transformers_options = {
        k: v
        for k, v in options.items()
        if k not in ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len")
    }
    return TransformersGenerator(model, **transformers_options)


def _vllm_usable() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())
