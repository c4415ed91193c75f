"""Evaluation: the metric maths against brute force, loading, grading, and a CPU end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advbudget.lab.cli import app
from advbudget.lab.eval import (
    avg_at_k,
    evaluate,
    load_benchmark,
    mean_pass_at_k,
    pass_at_k,
    score,
    score_generations,
)


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_1_is_avg():
    counts = [0, 3, 8, 5]
    assert mean_pass_at_k(counts, 8, 1) == pytest.approx(avg_at_k(counts, 8))


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((4, 2, 8), ValueError, r"k: expected 1 <= k <= n = 4 samples per problem, got 8"),
        ((4, 5, 1), ValueError, r"c: expected a count of correct samples in 0..4, got 5"),
        ((0, 0, 1), ValueError, r"n: expected at least one sample"),
        ((4, 1.0, 1), TypeError, r"c: expected an int, got float"),
    ],
)
def test_pass_at_k_errors(args, error, message):
    with pytest.raises(error, match=message):
        pass_at_k(*args)


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_load_local_benchmarks(tmp_path):
    rows = [{"problem": "2 + 2?", "answer": 4}, {"question": "x", "answer": 27.0}]
    problems = load_benchmark(str(write_jsonl(tmp_path / "mine.jsonl", rows[:1])))
    assert [(p.benchmark, p.problem, p.answer) for p in problems] == [("mine", "2 + 2?", "4")]
    amc_like = load_benchmark(str(write_jsonl(tmp_path / "amc.jsonl", rows[1:])))
    assert amc_like[0].answer == "27"  # integral floats, as some AMC uploads store them
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"problem": ["a", "b"], "answer": ["1", "-2"]}).to_parquet(tmp_path / "p.parquet")
    assert [p.answer for p in load_benchmark(str(tmp_path / "p.parquet"))] == ["1", "-2"]


def test_benchmark_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "a", "answer": "1"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: not valid JSON"):
        load_benchmark(str(bad))
    no_answer = write_jsonl(tmp_path / "no_answer.jsonl", [{"problem": "a", "solution": "1"}])
    with pytest.raises(
        ValueError, match=r"expected a 'answer' column .* got columns \['problem', 'solution'\]"
    ):
        load_benchmark(str(no_answer))
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"problem": "a", "answer": " "}])
    with pytest.raises(ValueError, match=r"row 0: expected a non-empty answer"):
        load_benchmark(str(empty))
    with pytest.raises(ValueError, match=r"benchmark: expected one of \['aime24', .* got 'aime23'"):
        load_benchmark("aime23")
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_benchmark(str(tmp_path / "missing.jsonl"))


def test_score_checks_sample_counts():
    records = [{"benchmark": "b", "correct": [True, False]}, {"benchmark": "b", "correct": [True]}]
    with pytest.raises(ValueError, match=r"b: expected the same number of samples .* got \[1, 2\]"):
        score(records)
    with pytest.raises(ValueError, match=r"k: expected pass@k with k <= n = 2"):
        score(records[:1], ks=[4])


class ScriptedGenerator:
    """Answers problem i correctly in the first ``i % (n + 1)`` samples."""

    def generate(self, messages, *, n, temperature, max_new_tokens, on_progress=None):
        outputs = []
        for i, chat in enumerate(messages):
            answer = chat[-1]["content"].split("ANSWER=")[1].split()[0]
            right = i % (n + 1)
            outputs.append([f"Answer: {answer}"] * right + ["Answer: nope"] * (n - right))
        if on_progress:
            on_progress(len(messages))
        return outputs


def test_evaluate_scores_exactly(tmp_path):
    rows = [{"problem": f"Say ANSWER={i} please", "answer": str(i)} for i in range(10)]
    bench = write_jsonl(tmp_path / "scripted.jsonl", rows)
    report = evaluate(
        "unused", [str(bench)], n=4, ks=[1, 4], generator=ScriptedGenerator(),
        grader="dapo", output_dir=tmp_path / "out", show_progress=False,
    )  # fmt: skip
    counts = [i % 5 for i in range(10)]
    (only,) = report.scores
    assert only.avg == pytest.approx(sum(counts) / 40)
    assert only.pass_at[4] == pytest.approx(sum(c > 0 for c in counts) / 10)
    assert only.pass_at[1] == pytest.approx(only.avg)
    # The written generations re-grade to the same scores.
    _, again = score_generations(tmp_path / "out" / "generations.jsonl", ks=[1, 4], grader="dapo")
    assert again.scores == report.scores
    assert json.loads((tmp_path / "out" / "scores.json").read_text())["benchmarks"]["average"][
        "avg"
    ] == pytest.approx(only.avg)


def test_score_generations_errors(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"benchmark": "b", "answer": "1", "samples": ["Answer: 1"]}\n{oops\n')
    with pytest.raises(ValueError, match=r"g.jsonl, line 2: not valid JSON"):
        score_generations(path)
    path.write_text('{"benchmark": "b", "samples": ["x"]}\n')
    with pytest.raises(ValueError, match=r"g.jsonl, line 1: missing field 'answer'"):
        score_generations(path)
    path.write_text('{"benchmark": "b", "answer": "1", "samples": "Answer: 1"}\n')
    with pytest.raises(ValueError, match=r"'samples' must be a list of strings"):
        score_generations(path)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("transformers")
    from advbudget.lab.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.mark.slow
def test_eval_cli_end_to_end_on_cpu(tiny_model, tmp_path):
    from advbudget.lab.data import sample_path

    out = tmp_path / "eval"
    args = [
        "eval", "--model", str(tiny_model), "--benchmarks", str(sample_path("eval")),
        "--n", "2", "--k", "1", "--k", "2", "--max-new-tokens", "6",
        "--backend", "transformers", "--output-dir", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "avg@2" in result.output
    scores = json.loads((out / "scores.json").read_text())
    lines = (out / "generations.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == len(load_benchmark(str(sample_path("eval"))))
    assert all(len(r["samples"]) == 2 and len(r["correct"]) == 2 for r in records)
    correct = sum(sum(r["correct"]) for r in records)
    assert scores["benchmarks"]["average"]["avg"] == pytest.approx(correct / (2 * len(records)))
    # Re-grading the written generations gives the same numbers (--score-only).
    again = CliRunner().invoke(
        app,
        [
            "eval",
            "--score-only",
            str(out / "generations.jsonl"),
            "--output-dir",
            str(tmp_path / "re"),
        ],
    )
    assert again.exit_code == 0, again.output


def test_eval_cli_reports_bad_input(tmp_path):
    result = CliRunner().invoke(app, ["eval", "--model", "x", "--benchmarks", "aime23"])
    assert result.exit_code == 2
    assert "aime23" in result.output
    result = CliRunner().invoke(app, ["eval", "--grader", "exact"])
    assert result.exit_code != 0
