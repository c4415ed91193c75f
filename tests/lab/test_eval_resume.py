"""A long evaluation can be resumed: killed mid-run, continued with --resume, it ends with
the generations and scores of an uninterrupted run."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advbudget.lab.cli import app
from advbudget.lab.eval import evaluate

PROBLEMS = 16


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("transformers")
    from advbudget.lab.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    from advbudget.lab.data import sample_path
    from advbudget.lab.eval import load_benchmark

    base = load_benchmark(str(sample_path("eval")))
    rows = [
        {"problem": f"{base[i % len(base)].problem} ({i})", "answer": base[i % len(base)].answer}
        for i in range(PROBLEMS)
    ]
    path = tmp_path_factory.mktemp("bench") / "bench.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def eval_args(model: Path, bench: Path, out: Path) -> list[str]:
    # Seeded sampling (temperature 0.7): each chunk of --batch-size problems has its seed.
    return ["eval", "--model", str(model), "--benchmarks", str(bench), "--n", "2",
            "--k", "1", "--k", "2", "--max-new-tokens", "16", "--temperature", "0.7",
            "--seed", "5", "--batch-size", "2", "--backend", "transformers",
            "--grader", "dapo", "--output-dir", str(out)]  # fmt: skip


def generations(out: Path) -> dict[tuple[str, int], list[str]]:
    lines = (out / "generations.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    table = {(r["benchmark"], r["index"]): r["samples"] for r in records}
    assert len(table) == len(records), "a problem was written twice"
    return table


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.slow
def test_killed_eval_resumes_to_the_uninterrupted_result(tiny_model, bench, tmp_path):
    reference = tmp_path / "reference"
    result = CliRunner().invoke(app, eval_args(tiny_model, bench, reference))
    assert result.exit_code == 0, result.output

    out = tmp_path / "killed"
    command = [sys.executable, "-c", "from advbudget.lab.cli import main; main()"]
    process = subprocess.Popen(
        command + eval_args(tiny_model, bench, out),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while line_count(out / "generations.jsonl") < 4:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "no problems written"
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)  # also closes the pipe
    assert not (out / "scores.json").exists(), "the run finished before it was killed"
    written = line_count(out / "generations.jsonl")
    assert 4 <= written < PROBLEMS
    # A crash in the middle of a write leaves a torn last line: it is dropped.
    with (out / "generations.jsonl").open("ab") as file:
        file.write(b'{"benchmark": "bench", "index": 99, "samp')

    # Without --resume the partial run is refused, and left as it was.
    refused = CliRunner().invoke(app, eval_args(tiny_model, bench, out))
    assert refused.exit_code == 2
    assert "--resume" in refused.stderr
    assert "Traceback" not in refused.output
    assert line_count(out / "generations.jsonl") == written

    resumed = CliRunner().invoke(app, [*eval_args(tiny_model, bench, out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert generations(out) == generations(reference)
    assert len(generations(out)) == PROBLEMS
    scores = json.loads((out / "scores.json").read_text())
    assert scores == json.loads((reference / "scores.json").read_text())
    table = resumed.stdout.split("Evaluation (percent)")[1].split("Scores in")[0]
    assert table == result.stdout.split("Evaluation (percent)")[1].split("Scores in")[0]


class Scripted:
    """Answers from its seed; three problems a call; Ctrl-C at call ``stop_after``."""

    chunk_size = 3

    def __init__(self, stop_after: int | None = None):
        self.calls, self.stop_after = 0, stop_after

    def generate(self, messages, *, n, temperature, max_new_tokens, seed=None):
        if self.calls == self.stop_after:
            raise KeyboardInterrupt
        self.calls += 1
        return [[f"Answer: {seed % 7}"] * n for _ in messages]


def scripted_bench(tmp_path: Path, count: int = 8) -> Path:
    path = tmp_path / "b.jsonl"
    rows = [{"problem": f"p{i}", "answer": str(i % 7)} for i in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run(bench: Path, out: Path, generator: Scripted, **options):
    settings = {"n": 2, "ks": [1, 2], "grader": "dapo", "seed": 1, **options}
    return evaluate("m", [str(bench)], generator=generator, output_dir=out,
                    show_progress=False, **settings)  # fmt: skip


def test_resume_checks_the_settings(tmp_path):
    bench = scripted_bench(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run(bench, out, Scripted(stop_after=1))
    assert json.loads((out / "settings.json").read_text())["n"] == 2
    for change, shown in [({"n": 3}, "n 2 (now 3)"), ({"seed": 2}, "seed 1 (now 2)"),
                          ({"temperature": 0.0}, "temperature 0.7 (now 0.0)"),
                          ({"grader": "math_verify"}, "grader 'dapo'")]:  # fmt: skip
        with pytest.raises(ValueError, match="other settings: " + re.escape(shown)):
            run(bench, out, Scripted(), resume=True, **{**change})
    with pytest.raises(ValueError, match=r"already holds 3 problems .* --resume"):
        run(bench, out, Scripted())
    report = run(bench, out, Scripted(), resume=True)
    fresh = run(bench, tmp_path / "fresh", Scripted())
    assert report.scores == fresh.scores
    assert generations(out) == generations(tmp_path / "fresh")


def test_resume_drops_a_torn_line_and_refuses_a_corrupt_one(tmp_path):
    bench = scripted_bench(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run(bench, out, Scripted(stop_after=2))
    path = out / "generations.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + b'{"benchmark": "b", "ind')  # torn: no newline
    run(bench, out, Scripted(), resume=True)
    assert generations(out) == generations(_fresh(bench, tmp_path))
    path.write_bytes(good[: good.index(b"\n") + 1] + b"{oops\n" + good[good.index(b"\n") + 1 :])
    with pytest.raises(ValueError, match=r"generations.jsonl, line 2: not valid JSON"):
        run(bench, out, Scripted(), resume=True)


def _fresh(bench: Path, tmp_path: Path) -> Path:
    fresh = tmp_path / "fresh"
    if not fresh.exists():
        run(bench, fresh, Scripted())
    return fresh
