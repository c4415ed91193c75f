"""Our data and reward files through OpenRLHF's own code: ``advbudget data prepare --format
openrlhf`` read by ``blending_datasets`` + ``PromptDataset`` (as ``prepare_datasets`` does,
chat template on), and ``advbudget/adapters/openrlhf/rewards.py`` loaded and called by OpenRLHF's
``SingleTurnAgentExecutor`` (``--reward.remote_url <file>.py``). The generation engine is a
stand-in that answers with a fixed text; the tokenizer is a tiny local one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("openrlhf")

import advbudget.adapters.openrlhf.rewards as reward_file
from advbudget.lab.data import load_problems, sample_path, write_openrlhf
from advbudget.lab.tiny import build_tiny_model

from .conftest import OPENRLHF_WARNINGS, import_openrlhf

pytestmark = OPENRLHF_WARNINGS


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def prompts(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Our OpenRLHF file of the shipped DAPO sample, through OpenRLHF's loading path."""
    import_openrlhf()
    from openrlhf.datasets import PromptDataset
    from openrlhf.datasets.utils import blending_datasets

    (path,) = write_openrlhf(
        {"train": load_problems(sample_path("dapo"))}, tmp_path_factory.mktemp("data")
    )
    args = SimpleNamespace(
        data=SimpleNamespace(input_key="prompt", label_key="label", apply_chat_template=True)
    )
    strategy = SimpleNamespace(args=args, is_rank_0=lambda: True, print=print)
    data = blending_datasets(str(path), None, strategy, 42, dataset_split="train")
    return PromptDataset(data, tokenizer, strategy), path


def test_openrlhf_reads_our_prompt_file(prompts: Any) -> None:
    dataset, path = prompts
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert len(dataset) == len(rows) == 64
    _, prompt, label, _ = dataset[0]
    assert label == rows[0]["label"] == "-11"
    # The chat template wrapped our user message, generation prompt last.
    assert prompt.startswith("<|im_start|>user\n")
    assert rows[0]["prompt"][0]["content"] in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


class AnsweringEngine:
    """Stand-in for a vLLM engine: always generates ``text`` and stops (eos included)."""

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.tokens = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]

    async def generate(self, prompt_ids: Any, params: Any, multi_modal_data: Any = None) -> Any:
        output = SimpleNamespace(token_ids=self.tokens, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


@pytest.mark.parametrize(
    ("text", "reward", "score"),
    [
        ("5 - 16 = -11.\nAnswer: -11", 1.0, 1.0),
        ("5 - 16 = 11.\nAnswer: 11", -1.0, 0.0),
        ("I am not sure.", -1.0, 0.0),
    ],
)
def test_reward_file_through_openrlhf_executor(
    prompts: Any, tokenizer: Any, text: str, reward: float, score: float
) -> None:
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    dataset, _ = prompts
    _, prompt, label, _ = dataset[0]
    executor = SingleTurnAgentExecutor(remote_rm_url=reward_file.__file__)
    assert executor.reward_func is not None  # OpenRLHF loaded our file by path
    out = asyncio.run(
        executor.execute(
            prompt,
            label,
            SimpleNamespace(max_tokens=64, logprobs=None),
            512,
            tokenizer,
            AnsweringEngine(tokenizer, text),
        )
    )
    assert float(out["reward"]) == reward
    assert float(out["scores"]) == score
    assert float(out["extra_logs"]["reward_error"]) == 0.0


def test_the_earlier_reward_path_keeps_working() -> None:
    """``advbudget/rewards/openrlhf.py``, in earlier commands: OpenRLHF loads it by path,
    and imported by name it is the reward module itself."""
    import importlib

    from openrlhf.utils.agent import SingleTurnAgentExecutor

    earlier = importlib.import_module("advbudget.rewards.openrlhf")
    assert earlier is reward_file
    path = Path(reward_file.__file__).parents[2] / "rewards" / "openrlhf.py"
    executor = SingleTurnAgentExecutor(remote_rm_url=str(path))
    assert executor.reward_func is not None  # OpenRLHF loaded the earlier file by path
