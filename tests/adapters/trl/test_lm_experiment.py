"""`advbudget experiment lm`: the task, the tokenizer, the cached warm start, and the quick
run end to end through TRL (weights change, every metric logged, groups kept). No test
says which estimator wins."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")

from advbudget.lab.lm import (  # noqa: E402
    ALPHABET,
    TIERS,
    carries,
    lm_config,
    make_splits,
    mixture,
    tier_of,
)

ROOT = Path(__file__).resolve().parents[3]
ADVBUDGET = Path(sys.executable).parent / "advbudget"


def test_carries_by_hand() -> None:
    assert [carries(12, 34), carries(18, 34), carries(55, 45), carries(199, 1)] == [0, 1, 2, 2]
    assert tier_of(40, 59) == "routine"
    assert tier_of(45, 45) == "hard"


def test_splits_are_disjoint_and_tiered() -> None:
    splits = make_splits(2, validation_per_tier=40, test_per_tier=80, seed=3)
    seen: dict[tuple[int, int], str] = {}
    for name in ("train", "validation", "test"):
        for tier in TIERS:
            problems = splits.split(name)[tier]
            assert problems, (name, tier)
            for p in problems:
                assert p.tier == tier == tier_of(p.a, p.b)
                assert p.a + p.b < 100  # no overflow: the answer keeps two digits
                key = (min(p.a, p.b), max(p.a, p.b))  # a+b and b+a: one problem
                assert seen.setdefault(key, name) == name, (p, name)
    assert len(splits.test["hard"]) == 80
    assert len(splits.validation["routine"]) == 40
    # Every allowed character appears in the prompts and reference completions.
    text = "".join(p.prompt + p.completion for p in splits.train["hard"][:200])
    assert set(text) <= set(ALPHABET) | set("Answer:")


def test_mixture_and_config_errors() -> None:
    train = make_splits(2).train
    drawn = mixture(train, 400, 0.0, seed=1)
    assert {p.tier for p in drawn} == {"routine"}
    with pytest.raises(ValueError, match=r"hard_fraction: expected a number in \[0, 1\], got 2"):
        mixture(train, 4, 2, seed=0)
    with pytest.raises(ValueError, match=r"digits: expected an int in 1\.\.3, got 5"):
        make_splits(5)
    with pytest.raises(ValueError, match="steps: expected an int >= 1, got 0"):
        lm_config("quick", steps=0)
    with pytest.raises(ValueError, match="estimator: expected one of"):
        lm_config(estimators=("budget", "nope"))
    with pytest.raises(ValueError, match="preset: expected one of"):
        lm_config("huge")
    with pytest.raises(ValueError, match=r"overrides: expected fields of LMConfig, got \['lr'\]"):
        lm_config(lr=0.1)
    # The warm start's cache key follows its own fields only.
    base = lm_config()
    assert lm_config(learning_rate=1.0, seeds=(7,)).warm_start_key() == base.warm_start_key()
    assert lm_config(sft_hard_fraction=0.5).warm_start_key() != base.warm_start_key()


def test_tokenizer_round_trip() -> None:
    from advbudget.lab.lm._model import build_tokenizer

    tokenizer = build_tokenizer()
    text = "12+34=?\nAnswer: 46"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len("12+34=?\n") + 1 + len(" 46")  # "Answer:" is one token
    assert tokenizer.decode(ids) == text
    assert tokenizer.unk_token_id is None or tokenizer.unk_token_id not in ids


@pytest.mark.filterwarnings("ignore:.*is deprecated and will be removed in v6:FutureWarning")
def test_warm_start_is_cached(tmp_path: Path) -> None:
    from advbudget.lab.lm._model import warm_start

    config = lm_config("quick", sft_max_steps=20, sft_check_every=10)
    logs: list[str] = []
    folder, record = warm_start(config, tmp_path, log=logs.append)
    assert folder.name == config.warm_start_key()
    assert [c["step"] for c in record["checks"]] in ([10], [10, 20])
    assert (folder / "model.safetensors").is_file()
    again, cached = warm_start(config, tmp_path, log=logs.append)
    assert again == folder
    assert cached == record
    assert logs[-1].startswith("warm start: cached")


def finite(values: list[Any]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def test_quick_run_end_to_end(tmp_path: Path) -> None:
    # The command exactly as docs/lm.md shows it; HOME keeps the cache in tmp_path.
    env = {**os.environ, "HOME": str(tmp_path), "COLUMNS": "80"}
    run = subprocess.run(
        [str(ADVBUDGET), "experiment", "lm", "--quick"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    assert "budget - grpo" in run.stdout
    assert "dead groups" in run.stdout
    wide = [line for line in run.stdout.splitlines() if len(line) > 80]
    assert not wide, wide  # every table fits an 80-column terminal
    out = tmp_path / "demo" / "lm"
    assert (out / "lm.png").stat().st_size > 10_000
    record = json.loads((out / "lm.json").read_text())
    with gzip.open(out / "lm_trl_logs.json.gz", "rt") as file:
        trl_logs = json.load(file)
    assert (tmp_path / ".cache" / "advbudget" / "lm").is_dir()
    config = record["config"]
    assert [(r["estimator"], r["seed"]) for r in record["runs"]] == [("grpo", 0), ("budget", 0)]
    n = config["eval_samples"]
    for run_record in record["runs"]:
        assert run_record["weights_changed"]
        history = run_record["history"]
        for key in (
            "reward", "train_entropy", "skipped_group_fraction", "kappa_eff",
            "unsolved_group_fraction", "solved_group_fraction",
            f"routine/avg@{n}", f"routine/pass@{n}", f"hard/avg@{n}", f"hard/pass@{n}",
            "entropy", "kl_to_warm_start",
        ):  # fmt: skip
            assert finite(history[key]), key
        assert len(history["reward"]) == config["steps"] + 1
        # Some groups had a reward gap: the update was not empty.
        assert min(finite(history["skipped_group_fraction"])) < 1
        assert max(finite(history["kl_to_warm_start"])) > 0
        for tier in TIERS:
            assert 0 <= run_record["test"][f"{tier}/avg@{n}"] <= 1
        # The same numbers are in TRL's own log history, at the evaluated steps.
        logged = trl_logs[f"{run_record['estimator']}/seed0"]
        steps = [e for e in logged if "loss" in e]
        assert len(steps) == config["steps"]
        evaluated = [e for e in steps if f"lm/hard/avg@{n}" in e]
        assert [e["step"] for e in evaluated] == list(
            range(config["eval_every"], config["steps"] + 1, config["eval_every"])
        )
        for entry in evaluated:
            assert entry[f"lm/routine/avg@{n}"] == history[f"routine/avg@{n}"][entry["step"]]
        assert any("advbudget/kappa_eff/mean" in e for e in steps)
    summary = record["summary"]
    assert set(summary["arms"]) == {"grpo", "budget"}
    assert set(summary["paired_differences"]) == {"budget - grpo"}
    diff = summary["paired_differences"]["budget - grpo"]["hard/avg"]["mean"]
    budget, grpo = (summary["arms"][e]["hard/avg"]["mean"] for e in ("budget", "grpo"))
    assert diff == pytest.approx(budget - grpo)


def test_bad_arguments_fail_cleanly(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ADVBUDGET), "experiment", "lm", *args], cwd=tmp_path,
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    bad = run("--estimators", "budget,nope", "--quick")
    assert bad.returncode == 2
    assert "--estimators" in bad.stderr
    assert "nope" in bad.stderr
    device = run("--quick", "--device", "tpu")
    assert device.returncode == 2
    assert "device: expected 'cpu', 'cuda' or 'cuda:N', got 'tpu'" in device.stderr


def test_gpu_script_dry_run(tmp_path: Path) -> None:
    # The GPU script's own code path, on the CPU preset that fits a test.
    env = {**os.environ, "HOME": str(tmp_path), "PYTHON": sys.executable}
    run = subprocess.run(
        ["bash", str(ROOT / "examples" / "gpu_lm.sh"), "--dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    assert "would install: nothing" in run.stdout
    assert (tmp_path / "gpu_lm_dry_run" / "lm.json").is_file()


def test_summary_by_hand() -> None:
    from advbudget.lab.lm._experiment import mean_se, summarize

    config = lm_config("quick", estimators=("grpo", "budget"), seeds=(0, 1))

    def run(estimator: str, seed: int, hard: float) -> dict[str, Any]:
        scores = {"routine/avg@8": 0.5, "routine/pass@8": 0.9, "hard/avg@8": hard}
        scores |= {"hard/pass@8": 2 * hard, "entropy": 0.3, "kl_to_warm_start": 0.1}
        history = {"skipped_group_fraction": [None, 0.5, 0.25], "kappa_eff": [None, 1.0, None]}
        history["reward"] = [None, 0.5, 0.5]
        history["unsolved_group_fraction"] = [None, 0.25, 0.75]
        history["never_solved_prompt_fraction"] = [None, None, hard]
        return {
            "estimator": estimator, "seed": seed, "test": scores, "history": history,
            "test_warm_start": scores, "seconds": 1.0,
        }  # fmt: skip

    runs = [run("grpo", 0, 0.10), run("budget", 0, 0.20), run("grpo", 1, 0.30)]
    runs.append(run("budget", 1, 0.20))
    summary = summarize(config, runs)
    assert summary["arms"]["grpo"]["hard/avg"]["mean"] == pytest.approx(0.2)
    assert summary["arms"]["grpo"]["hard/avg"]["se"] == pytest.approx(0.1)  # std 0.1414 / √2
    assert summary["arms"]["budget"]["hard/avg"]["se"] == 0.0
    assert summary["arms"]["grpo"]["skipped_group_fraction_mean"]["mean"] == 0.375
    assert summary["arms"]["grpo"]["unsolved_group_fraction_mean"]["mean"] == 0.5
    # the ledger's last value, per seed, then over seeds: (0.1 + 0.3) / 2
    assert summary["arms"]["grpo"]["final_never_solved_prompt_fraction"]["mean"] == 0.2
    assert "solved_group_fraction_mean" not in summary["arms"]["grpo"]  # not logged
    diff = summary["paired_differences"]["budget - grpo"]
    assert diff["hard/avg"]["mean"] == pytest.approx(0.0)  # +0.1 and -0.1
    assert diff["hard/avg"]["se"] == pytest.approx(0.1)
    assert diff["hard/pass"]["mean"] == pytest.approx(0.0)
    assert diff["routine/avg"] == {"mean": 0.0, "se": 0.0, "n": 2}
    with pytest.raises(ValueError, match="values: expected at least one value"):
        mean_se([])
