"""``advbudget compare RUN ...`` on scores.json files written by ``advbudget eval``'s own
writer: values in points, deltas against the first run, the paper's gains, the terminal
width, and one-line errors for missing or invalid files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advbudget.lab.cli import app
from advbudget.lab.cli._compare import PAPER_MAX_GAINS, load_run
from advbudget.lab.eval import BenchmarkScore, EvalReport, write_outputs

BASELINE = {"amc23": (0.55, 0.80), "aime24": (0.20, 0.40), "math500": (0.80, 0.95)}
BUDGET = {"amc23": (0.625, 0.85), "aime24": (0.25, 0.50), "math500": (0.79, 0.95)}


def write_run(root: Path, name: str, scores: dict[str, tuple[float, float]], k: int = 8) -> Path:
    """A run folder as the examples leave it: ``<run>/eval/scores.json`` (and generations)."""
    rows = [BenchmarkScore(b, 40, 8, avg, {k: passed}) for b, (avg, passed) in scores.items()]
    records = [{"benchmark": b, "answer": "1", "samples": ["Answer: 1"] * 8} for b in scores]
    write_outputs(root / name / "eval", records, EvalReport(rows, {"model": name}))
    return root / name


def invoke(*args: str, columns: int = 200):
    return CliRunner().invoke(app, ["compare", *args], env={"COLUMNS": str(columns)})


def rows(output: str, title: str) -> dict[str, list[str]]:
    """The table under ``title``: benchmark -> the other cells."""
    table = output[output.index(title) :]
    found: dict[str, list[str]] = {}
    for line in table.splitlines()[4:]:
        if line.startswith("└"):
            break
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            found[cells[0]] = cells[1:]
    return found


def test_deltas_against_the_first_run(tmp_path: Path) -> None:
    grpo = write_run(tmp_path, "qwen3-8b_grpo_grpo", BASELINE)
    budget = write_run(tmp_path, "qwen3-8b_grpo_budget", BUDGET)
    result = invoke(str(grpo), str(budget))
    assert result.exit_code == 0, result.output
    assert "qwen3-8b_grpo_grpo" in result.output
    assert "qwen3-8b_grpo_budget (Δ)" in result.output
    avg = rows(result.output, "avg@8")
    # hand-computed: 62.5 - 55 = +7.5; 25 - 20 = +5; 79 - 80 = -1; means 155/3 -> 166.5/3
    assert avg["amc23"] == ["55.00", "62.50 (+7.50)", "+12.50"]
    assert avg["aime24"] == ["20.00", "25.00 (+5.00)", "+10.00"]
    assert avg["math500"] == ["80.00", "79.00 (-1.00)", ""]
    assert avg["average"] == ["51.67", "55.50 (+3.83)", ""]
    passed = rows(result.output, "pass@8")
    assert passed["aime24"] == ["40.00", "50.00 (+10.00)", "+10.00"]
    assert passed["math500"] == ["95.00", "95.00 (+0.00)", ""]
    assert "arXiv 2611.05942" in result.output


def test_the_paper_gains_are_the_reported_ones() -> None:
    assert PAPER_MAX_GAINS == {"amc23": 12.50, "aime24": 10.00, "aime25": 10.00}


def test_a_file_a_folder_and_its_eval_folder_name_the_same_run(tmp_path: Path) -> None:
    run = write_run(tmp_path, "llama3.2-3b_dapo_budget", BUDGET)
    for given in (run, run / "eval", run / "eval" / "scores.json"):
        loaded = load_run(given)
        assert loaded.label == "llama3.2-3b_dapo_budget"
        assert loaded.benchmarks["amc23"].pass_at == {8: 0.85}


def test_benchmarks_missing_from_a_run_show_a_dash(tmp_path: Path) -> None:
    first = write_run(tmp_path, "a", BASELINE)
    second = write_run(tmp_path, "b", {"amc23": (0.6, 0.9), "aime25": (0.1, 0.2)})
    result = invoke(str(first), str(second), "--metric", "avg")
    assert result.exit_code == 0, result.output
    avg = rows(result.output, "avg@8")
    assert avg["aime24"][:2] == ["20.00", "–"]
    assert avg["aime25"][:2] == ["–", "10.00"]
    assert avg["amc23"][:2] == ["55.00", "60.00 (+5.00)"]
    assert "pass@" not in result.output


def test_fits_a_narrow_terminal_with_numbered_runs(tmp_path: Path) -> None:
    names = ["qwen3-8b_dapo_clipcov_grpo", "qwen3-8b_dapo_clipcov_budget", "qwen3-8b_dapo_budget"]
    runs = [str(write_run(tmp_path, name, BUDGET)) for name in names]
    result = invoke(*runs, columns=80)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "#1: qwen3-8b_dapo_clipcov_grpo" in result.output
    assert rows(result.output, "avg@8")["amc23"] == [
        "62.50",
        "62.50 (+0.00)",
        "62.50 (+0.00)",
        "+12.50",
    ]
    wide = invoke(*runs, columns=200)
    assert "#1:" not in wide.output
    assert "qwen3-8b_dapo_clipcov_budget (Δ)" in wide.output


def test_the_same_name_twice_is_told_apart(tmp_path: Path) -> None:
    run = write_run(tmp_path, "r", BASELINE)
    result = invoke(str(run), str(run / "eval" / "scores.json"))
    assert result.exit_code == 0, result.output
    assert "r #2 (Δ)" in result.output


def test_pass_at_k_falls_back_to_the_largest_common_k(tmp_path: Path) -> None:
    first = write_run(tmp_path, "a", BASELINE, k=4)
    second = write_run(tmp_path, "b", BUDGET, k=4)
    assert "pass@4" in invoke(str(first), str(second)).output
    third = write_run(tmp_path, "c", BUDGET, k=8)
    result = invoke(str(first), str(third), "--metric", "pass")
    assert result.exit_code == 2
    assert "no pass@k common to every run" in result.stderr


def one_error(result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_missing_runs_fail_before_anything_is_printed(tmp_path: Path) -> None:
    good = write_run(tmp_path, "good", BASELINE)
    result = invoke(str(good), str(tmp_path / "nowhere"))
    one_error(result, 2, "RUN:", "nowhere", "no such file or folder")
    assert "avg@" not in result.stdout
    (tmp_path / "untrained").mkdir()
    result = invoke(str(good), str(tmp_path / "untrained"))
    one_error(result, 2, "no scores.json", "untrained/eval/scores.json", "advbudget eval")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{", "not valid JSON (line 1, column 2"),
        ("[1, 2]", "expected an object with a 'benchmarks' object"),
        ('{"benchmarks": {}}', "expected at least one benchmark"),
        ('{"benchmarks": {"a": {"avg": "x", "samples_per_problem": 8}}}', "benchmarks.a.avg"),
        ('{"benchmarks": {"a": {"avg": NaN, "samples_per_problem": 8}}}', "finite number"),
        ('{"benchmarks": {"a": {"avg": 0.5}}}', "benchmarks.a.samples_per_problem"),
        (
            '{"benchmarks": {"a": {"avg": 0.5, "samples_per_problem": 8, "pass_at": {"k": 1}}}}',
            "integer keys",
        ),
    ],
)
def test_invalid_scores_name_the_field(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "scores.json"
    path.write_text(text)
    one_error(invoke(str(path)), 1, str(path), fragment)


def test_the_writer_and_the_reader_agree(tmp_path: Path) -> None:
    run = write_run(tmp_path, "x", BASELINE)
    written = json.loads((run / "eval" / "scores.json").read_text())
    loaded = load_run(run)
    assert set(loaded.benchmarks) == set(written["benchmarks"])
    assert loaded.benchmarks["average"].avg == pytest.approx((0.55 + 0.20 + 0.80) / 3)


def test_bad_metric() -> None:
    result = invoke("x", "--metric", "median")
    assert result.exit_code == 2
    assert re.search(r"expected one of both, avg, pass", result.output)
