"""The tokenizer, the tiny Qwen3 model, held-out evaluation and the cached warm start."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from advbudget.rewards import is_correct

from .._machine import machine_info
from ..eval import avg_at_k, mean_pass_at_k
from ..tiny import tiny_qwen3_config, word_level_tokenizer
from ._config import LMConfig
from ._task import ALPHABET, ANSWER_WORD, TIERS, Problem, TaskSplits, Tier, make_splits, mixture

WARM_START_FILE = "warm_start.json"


def build_tokenizer() -> Any:
    """The task's tokenizer: one token per character of :data:`ALPHABET`, plus ``Answer:``."""
    return word_level_tokenizer(ALPHABET, words=[ANSWER_WORD])


def build_model(config: LMConfig, tokenizer: Any, seed: int) -> Any:
    """A randomly initialised ``Qwen3ForCausalLM`` of the config's size."""
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    model_config = tiny_qwen3_config(
        tokenizer,
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        num_kv_heads=max(1, config.num_heads // 2),
        max_positions=64,
    )
    return Qwen3ForCausalLM(model_config)


def task_splits(config: LMConfig) -> TaskSplits:
    return make_splits(
        config.digits,
        validation_per_tier=config.validation_per_tier,
        test_per_tier=config.test_per_tier,
        seed=config.task_seed,
    )


def evaluate(
    model: Any,
    tokenizer: Any,
    problems: dict[Tier, list[Problem]],
    *,
    samples: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    seed: int = 0,
    reference: Any = None,
) -> dict[str, float]:
    """avg@n and pass@n per tier from ``samples`` sampled completions of each problem,
    the mean token entropy of those completions and, with a ``reference`` model, the mean
    per-token KL(model ‖ reference) on them (exact over the vocabulary at each position).

    Sampling runs under its own seed with the caller's random state restored afterwards,
    so evaluating does not change what training samples next.
    """
    import torch

    was_training = model.training
    model.eval()
    devices = [model.device] if model.device.type == "cuda" else []
    out: dict[str, float] = {}
    entropy_sum = kl_sum = tokens = 0.0
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(seed)
            for tier in TIERS:
                tier_problems = problems[tier]
                correct, stats = _sample_tier(
                    model,
                    tokenizer,
                    tier_problems,
                    samples,
                    max_new_tokens,
                    temperature,
                    reference,
                )
                out[f"{tier}/avg@{samples}"] = avg_at_k(correct, samples)
                out[f"{tier}/pass@{samples}"] = mean_pass_at_k(correct, samples, samples)
                entropy_sum += stats[0]
                kl_sum += stats[1]
                tokens += stats[2]
    finally:
        model.train(was_training)
    out["entropy"] = entropy_sum / max(tokens, 1.0)
    if reference is not None:
        out["kl_to_warm_start"] = kl_sum / max(tokens, 1.0)
    return out


def _sample_tier(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    samples: int,
    max_new_tokens: int,
    temperature: float,
    reference: Any,
) -> tuple[list[int], tuple[float, float, float]]:
    import torch

    tokenizer.padding_side = "left"
    batch = tokenizer([p.prompt for p in problems], return_tensors="pt", padding=True)
    batch = {k: v.to(model.device) for k, v in batch.items()}
    sequences = model.generate(
        **batch,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        num_return_sequences=samples,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    prompt_length = batch["input_ids"].shape[1]
    completion = sequences[:, prompt_length:]
    # Completion tokens up to and including the first eos.
    is_eos = completion == tokenizer.eos_token_id
    after_eos = (torch.cumsum(is_eos.int(), dim=1) - is_eos.int()) > 0
    completion_mask = (~after_eos).float()
    texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
    correct = [0] * len(problems)
    for index, text in enumerate(texts):
        problem = problems[index // samples]
        correct[index // samples] += is_correct(text, problem.answer, method="dapo")
    attention = torch.cat(
        [batch["attention_mask"].repeat_interleave(samples, dim=0), completion_mask.long()],
        dim=1,
    )
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)

    def log_probs(network: Any) -> Any:
        logits = network(
            input_ids=sequences, attention_mask=attention, position_ids=positions
        ).logits[:, prompt_length - 1 : -1]
        return torch.log_softmax(logits.float() / temperature, dim=-1)

    logp = log_probs(model)
    entropy = -(logp.exp() * logp).sum(-1)
    stats_kl = 0.0
    if reference is not None:
        ref_logp = log_probs(reference)
        kl = (logp.exp() * (logp - ref_logp)).sum(-1)
        stats_kl = float((kl * completion_mask).sum())
    return correct, (
        float((entropy * completion_mask).sum()),
        stats_kl,
        float(completion_mask.sum()),
    )


class _ProblemBatches:
    """A torch-style dataset of problems; the collator tokenizes a batch at once."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems

    def __len__(self) -> int:
        return len(self.problems)

    def __getitem__(self, index: int) -> Problem:
        return self.problems[index]


def _collator(tokenizer: Any) -> Callable[[list[Problem]], dict[str, Any]]:
    """Prompt + completion + eos, right-padded; the loss is on the completion only."""
    import torch

    def collate(problems: list[Problem]) -> dict[str, Any]:
        prompts = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
        completions = tokenizer([p.completion for p in problems], add_special_tokens=False)[
            "input_ids"
        ]
        rows = [p + c + [tokenizer.eos_token_id] for p, c in zip(prompts, completions, strict=True)]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, prompt) in enumerate(zip(rows, prompts, strict=True)):
            input_ids[i, : len(row)] = torch.tensor(row)
            labels[i, len(prompt) : len(row)] = torch.tensor(row[len(prompt) :])
            attention[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}

    return collate


def _made_elsewhere(record: dict[str, Any]) -> str:
    """A note when a cached warm start was trained with another thread count or CPU:
    its weights then differ from what this machine would train (docs/lm.md, §7)."""
    import torch

    made = record.get("machine", {})
    now = machine_info(packages=())
    differences = []
    if record.get("torch_threads") not in (None, torch.get_num_threads()):
        differences.append(f"{record['torch_threads']} threads, now {torch.get_num_threads()}")
    if made.get("cpu") and made["cpu"] != now["cpu"]:
        differences.append(f"CPU {made['cpu'].get('model')}")
    return f" (trained with {'; '.join(differences)})" if differences else ""


def warm_start(
    config: LMConfig,
    cache_dir: Path,
    *,
    log: Callable[[str], None] = print,
) -> tuple[Path, dict[str, Any]]:
    """The supervised warm start of ``config``: from ``cache_dir/<key>`` if it is there,
    else trained with transformers' ``Trainer`` and written there. Returns the model
    folder and its record (the checks along the way, where it stopped, the time taken).

    Training stops at the first check (every ``sft_check_every`` steps) where routine
    avg@n on the validation split reaches ``sft_target_routine`` and hard avg@n is above
    zero: routine moderate, hard rare but reachable, where RL starts from in the paper.
    """
    folder = Path(cache_dir) / config.warm_start_key()
    record_path = folder / WARM_START_FILE
    if record_path.is_file():
        record: dict[str, Any] = json.loads(record_path.read_text(encoding="utf-8"))
        log(f"warm start: cached in {folder}{_made_elsewhere(record)}")
        return folder, record
    import torch
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    started = time.perf_counter()
    splits = task_splits(config)
    tokenizer = build_tokenizer()
    model = build_model(config, tokenizer, config.sft_seed)
    data = mixture(
        splits.train,
        config.sft_max_steps * config.sft_batch_size,
        config.sft_hard_fraction,
        seed=config.sft_seed,
    )
    checks: list[dict[str, Any]] = []
    key = f"avg@{config.eval_samples}"

    class StopWhenModerate(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if state.global_step % config.sft_check_every:
                return control
            scores = evaluate(
                model,
                tokenizer,
                splits.validation,
                samples=config.eval_samples,
                max_new_tokens=config.max_completion_length,
                seed=config.sft_seed,
            )
            checks.append({"step": state.global_step, **scores})
            log(
                f"warm start step {state.global_step}: routine {scores['routine/' + key]:.3f}"
                f" hard {scores['hard/' + key]:.3f}"
            )
            if scores[f"routine/{key}"] >= config.sft_target_routine and scores[f"hard/{key}"] > 0:
                control.should_training_stop = True
            return control

    work = folder.with_name(folder.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    args = TrainingArguments(
        output_dir=str(work / "trainer"),
        per_device_train_batch_size=config.sft_batch_size,
        max_steps=config.sft_max_steps,
        learning_rate=config.sft_learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        logging_steps=config.sft_check_every,
        save_strategy="no",
        report_to="none",
        use_cpu=config.device == "cpu",
        seed=config.sft_seed,
        data_seed=config.sft_seed,
        # torch's deterministic algorithms: with the fixed thread count (--threads), the
        # warm start is bit-for-bit the same on one machine (docs/lm.md: across machines)
        full_determinism=True,
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=_ProblemBatches(data),
        data_collator=_collator(tokenizer),
        callbacks=[StopWhenModerate()],
    )
    trainer.remove_callback(PrinterCallback)  # the checks are logged instead
    trainer.train()
    model = trainer.model.to("cpu")
    del trainer
    model.save_pretrained(work)
    tokenizer.save_pretrained(work)
    last = checks[-1] if checks else {}
    record = {
        "key": config.warm_start_key(),
        "steps": int(last.get("step", config.sft_max_steps)),
        "reached_target": bool(
            last and last[f"routine/{key}"] >= config.sft_target_routine and last[f"hard/{key}"] > 0
        ),
        "checks": checks,
        "seconds": time.perf_counter() - started,
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch_threads": torch.get_num_threads(),
        "machine": machine_info(),
    }
    (work / WARM_START_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
    shutil.rmtree(work / "trainer", ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    work.rename(folder)
    log(f"warm start: {record['steps']} steps in {record['seconds']:.0f} s, saved in {folder}")
    return folder, record
