"""advbudget.lab.data: loading DAPO-style data, deduplication, splits, the three writers, the CLI.

Checked against the bundled sample (answers recomputed here), files written by the tests in
each supported schema, and DAPO's own AIME-2024 file beside the checkout.
"""

from __future__ import annotations

import ast
import json
import operator
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from advbudget.lab.cli._data import app
from advbudget.lab.data import (
    DAPO_PROMPT_PREFIX,
    DAPO_PROMPT_SUFFIX,
    DEFAULT_SOURCE,
    DataError,
    DedupReport,
    Problem,
    dapo_prompt,
    deduplicate,
    extract_problem,
    load_problems,
    parse_formats,
    prepare,
    sample_path,
    split_problems,
    write_openrlhf,
    write_trl,
    write_tunix,
    write_verl,
)
from advbudget.lab.data._problems import text_index

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "advbudget" / "lab" / "data" / "sample"
AIME = Path(__file__).resolve().parents[3] / "shared" / "data" / "dapo-aime-2024.parquet"
needs_aime = pytest.mark.skipif(not AIME.exists(), reason=f"real data file not found: {AIME}")


# ----------------------------------------------------------------------------- helpers


def evaluate(expression: str) -> int:
    """An integer expression in Python syntax, computed exactly without eval()."""
    operators = {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.Pow: operator.pow,
    }

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in operators:
            return operators[type(node.op)](walk(node.left), walk(node.right))
        raise AssertionError(f"unexpected syntax in {expression!r}: {ast.dump(node)}")

    value = walk(ast.parse(expression, mode="eval"))
    assert value.denominator == 1, f"{expression!r} is not an integer: {value}"
    return int(value)


def literals(expression: str) -> set[int]:
    return {
        node.value
        for node in ast.walk(ast.parse(expression, mode="eval"))
        if isinstance(node, ast.Constant)
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def dapo_row(problem: str, answer: Any, index: Any = "i0", raw: bool = True) -> dict[str, Any]:
    extra = {"index": index, "raw_problem": problem, "split": "train"}
    if not raw:
        del extra["raw_problem"]
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": dapo_prompt(problem), "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
        "extra_info": extra,
    }


def load_back(kind: str, files: dict[str, str], cache: Path) -> Any:
    """Read files the way TRL / OpenRLHF do: through datasets.load_dataset."""
    datasets = pytest.importorskip("datasets")
    return datasets.load_dataset(kind, data_files=files, cache_dir=str(cache))


@pytest.fixture
def sample() -> list[Problem]:
    return load_problems(sample_path("dapo"))


# ----------------------------------------------------------------------------- samples


def test_sample_answers_are_recomputed_from_their_expressions():
    rows = read_jsonl(sample_path("dapo"))
    assert len(rows) == 64
    for row in rows:
        raw = row["extra_info"]["raw_problem"]
        truth = row["reward_model"]["ground_truth"]
        assert isinstance(truth, str)
        assert evaluate(row["expression"]) == int(truth), row
        # The exact DAPO template, byte for byte, as the user message.
        assert row["prompt"] == [
            {"role": "user", "content": DAPO_PROMPT_PREFIX + raw + DAPO_PROMPT_SUFFIX}
        ]
        assert (row["data_source"], row["ability"]) == ("math_dapo", "MATH")
        assert row["reward_model"]["style"] == "rule-lighteval/MATH_v2"
        # Every number of the computation is one the problem states.
        stated = {int(n) for n in re.findall(r"\d+", raw)}
        implicit = {1, 2} if raw.startswith("What is the sum of all integers") else set()
        assert {abs(n) for n in literals(row["expression"])} - stated - implicit == set(), raw
    answers = [int(row["reward_model"]["ground_truth"]) for row in rows]
    assert sum(a < 0 for a in answers) == 37
    assert len({row["extra_info"]["index"] for row in rows}) == 64
    assert len({row["extra_info"]["raw_problem"] for row in rows}) == 64


def test_eval_sample_answers_are_recomputed_and_held_out():
    rows = read_jsonl(sample_path("eval"))
    assert len(rows) == 12
    for row in rows:
        assert sorted(row) == ["answer", "expression", "problem"]
        assert evaluate(row["expression"]) == int(row["answer"])
    train = {row["extra_info"]["raw_problem"] for row in read_jsonl(sample_path("dapo"))}
    assert not train & {row["problem"] for row in rows}
    assert [p.answer for p in load_problems(sample_path("eval"))] == [r["answer"] for r in rows]


def test_sample_readme_script_reproduces_the_files_byte_for_byte(tmp_path):
    readme = (SAMPLE_DIR / "README.md").read_text(encoding="utf-8")
    (script,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    namespace: dict[str, Any] = {"__name__": "sample_readme"}
    exec(compile(script, "README.md", "exec"), namespace)
    namespace["write_samples"](tmp_path)
    for name in ("dapo_sample.jsonl", "eval_sample.jsonl"):
        assert (tmp_path / name).read_bytes() == (SAMPLE_DIR / name).read_bytes(), name


def test_sample_path_finds_package_files_and_rejects_unknown_names():
    assert sample_path() == sample_path("dapo")
    assert sample_path("dapo").resolve() == (SAMPLE_DIR / "dapo_sample.jsonl").resolve()
    with pytest.raises(ValueError, match=r"name: expected one of \['dapo', 'eval'\], got 'x'"):
        sample_path("x")


def test_import_is_light():
    code = (
        "import sys, advbudget.lab.data;"
        "print([m for m in ('pandas', 'pyarrow', 'datasets', 'typer') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- template


@given(st.text())
def test_extract_problem_inverts_the_template(problem):
    assert extract_problem(dapo_prompt(problem)) == problem


def test_extract_problem_leaves_other_text_alone():
    assert extract_problem("What is 1 + 1?") == "What is 1 + 1?"
    assert extract_problem(DAPO_PROMPT_PREFIX + "no suffix") == DAPO_PROMPT_PREFIX + "no suffix"


@given(st.lists(st.text(alphabet="ab \n\t", min_size=1), min_size=1, max_size=4))
def test_text_index_ignores_whitespace_runs(words):
    spaced = [{"role": "user", "content": "  ".join(words)}]
    tight = [{"role": "user", "content": " ".join(" ".join(words).split())}]
    assert text_index(spaced) == text_index(tight)


def test_problem_from_text_checks_its_arguments():
    assert Problem.from_text("Compute $1 - 4$.", -3).answer == "-3"
    with pytest.raises(ValueError, match=r"answer: expected a string or an int, got 2\.5"):
        Problem.from_text("p", 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="problem: expected a non-empty string"):
        Problem.from_text("  ", "1")


# ----------------------------------------------------------------------------- loading


def test_load_sample_in_the_dapo_schema(sample):
    first = sample[0]
    assert (first.problem, first.answer, first.index) == (
        "Compute $32 \\div 4 - 19$.",
        "-11",
        "dapo-sample-00",
    )
    assert first.prompt_messages == [{"role": "user", "content": dapo_prompt(first.problem)}]
    assert (first.data_source, first.ability) == ("math_dapo", "MATH")


def test_dapo_rows_without_raw_problem_strip_the_template(tmp_path):
    source = write_jsonl(tmp_path / "d.jsonl", [dapo_row("Find $x$.", "7", raw=False)])
    (problem,) = load_problems(source)
    assert problem.problem == "Find $x$."
    assert problem.prompt_messages[0]["content"] == dapo_prompt("Find $x$.")


def test_dapo_parquet_with_int_index_and_int_ground_truth(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [dapo_row("What is $6 \\times 7$?", 42, index=5), dapo_row("Neg?", -3, index=6)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    problems = load_problems(tmp_path / "d.parquet")
    assert [(p.index, p.answer) for p in problems] == [("5", "42"), ("6", "-3")]


def test_problem_answer_schema_gets_the_template(tmp_path):
    source = write_jsonl(
        tmp_path / "p.jsonl", [{"problem": "What is $2 - 9$?", "answer": -7, "other": 1}]
    )
    (problem,) = load_problems(source)
    assert (problem.problem, problem.answer) == ("What is $2 - 9$?", "-7")
    assert problem.prompt_messages == [{"role": "user", "content": dapo_prompt("What is $2 - 9$?")}]
    assert problem.index.startswith("text-")


def test_pandas_parquet_in_the_problem_answer_schema(tmp_path):
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"problem": ["a?", "b?"], "answer": [3, -4]}).to_parquet(tmp_path / "p.parquet")
    assert [p.answer for p in load_problems(tmp_path / "p.parquet")] == ["3", "-4"]


def test_open_r1_prompt_solution_schema(tmp_path):
    # open-r1's processed copy: the templated user message as a plain string.
    rows = [{"prompt": dapo_prompt("Compute $5^2$."), "solution": "25"}]
    (problem,) = load_problems(write_jsonl(tmp_path / "o.jsonl", rows))
    assert (problem.problem, problem.answer) == ("Compute $5^2$.", "25")
    assert problem.prompt_messages[0]["content"] == dapo_prompt("Compute $5^2$.")


def test_openrlhf_prompt_label_schema_keeps_chat_messages(tmp_path):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": dapo_prompt("Compute $3 - 10$.")},
    ]
    rows = [{"prompt": messages, "label": "-7"}, {"prompt": "Compute $1+1$.", "label": "2"}]
    chat, bare = load_problems(write_jsonl(tmp_path / "r.jsonl", rows))
    assert chat.prompt_messages == messages
    assert chat.problem == "Compute $3 - 10$."
    assert bare.prompt_messages == [{"role": "user", "content": dapo_prompt("Compute $1+1$.")}]


def test_json_array_files(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(
        json.dumps([{"problem": "x?", "answer": "1"}, {"problem": "y?", "answer": "2"}])
    )
    assert [p.answer for p in load_problems(path)] == ["1", "2"]
    lines = tmp_path / "lines.json"  # a .json file in JSON-lines layout, as datasets allows
    write_jsonl(lines, [{"problem": "x?", "answer": "1"}])
    assert len(load_problems(lines)) == 1
    bom = tmp_path / "bom.jsonl"  # editors on Windows like to add one
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"problem": "x?", "answer": "1"}).encode())
    assert load_problems(bom)[0].answer == "1"


def test_hub_ids_go_through_datasets_load_dataset(monkeypatch, tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = read_jsonl(sample_path("dapo"))
    calls = []

    def fake_load_dataset(path, name=None, *, split=None):
        calls.append((path, name, split))
        return datasets.Dataset.from_list(rows * 2)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    problems = load_problems()
    assert calls == [(DEFAULT_SOURCE, None, "train")]
    unique, report = deduplicate(problems)
    assert (report.rows_before, report.rows_after) == (128, 64)
    assert unique == load_problems(sample_path("dapo"))
    load_problems("open-r1/DAPO-Math-17k-Processed", config="en", split="train")
    assert calls[-1] == ("open-r1/DAPO-Math-17k-Processed", "en", "train")


# ----------------------------------------------------------------------------- dedup, split


def test_deduplicate_keeps_first_occurrence_on_the_index(sample):
    rows = sample[10:] + sample * 3
    unique, report = deduplicate(rows)
    assert unique == sample[10:] + sample[:10]
    assert report == DedupReport(
        rows_before=64 * 3 + 54, rows_after=64, conflicts=0, unique_indices=64
    )
    assert report.removed == 64 * 3 + 54 - 64


def test_deduplicate_on_prompt_text_without_an_index(tmp_path):
    rows = [
        {"problem": "What is  $1+1$?", "answer": "2"},
        {"problem": "What is $1+1$? ", "answer": "2"},
        {"problem": "What is $2+2$?", "answer": "4"},
        {"problem": "What is $2+2$?", "answer": "5"},  # the same prompt, a different answer
    ]
    unique, report = deduplicate(load_problems(write_jsonl(tmp_path / "t.jsonl", rows)))
    assert [p.answer for p in unique] == ["2", "4"]
    assert report == DedupReport(rows_before=4, rows_after=2, conflicts=1, unique_indices=2)


def test_split_is_seeded_and_selects_before_holding_out(sample):
    train, val = split_problems(sample, val_size=10, max_samples=50, seed=3)
    assert (len(train), len(val)) == (40, 10)
    assert (train, val) == split_problems(sample, val_size=10, max_samples=50, seed=3)
    assert train != split_problems(sample, val_size=10, max_samples=50, seed=4)[0]
    assert not {p.index for p in train} & {p.index for p in val}
    in_order, tail = split_problems(sample, val_size=4, shuffle=False)
    assert (in_order, tail) == (sample[:60], sample[60:])
    assert split_problems(sample, max_samples=1000, shuffle=False) == (sample, [])


def test_val_fraction_rounds_and_holds_out_at_least_one(sample):
    assert len(split_problems(sample, val_fraction=0.25)[1]) == 16
    assert len(split_problems(sample[:5], val_fraction=0.01)[1]) == 1
    assert len(split_problems(sample, val_fraction=0.0)[1]) == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"val_size": 64}, r"val_size=64 leaves no training problem: .* smaller than the 64"),
        ({"val_size": 10, "max_samples": 10}, r"val_size=10 .* smaller than the 10 problems"),
        ({"val_fraction": 0.995}, r"val_fraction=0.995 \(64 problems\) leaves no training"),
        ({"val_size": 2, "val_fraction": 0.1}, "give one of them, got val_size=2 and"),
        ({"val_size": -1}, r"val_size: expected an int >= 0, got -1"),
        ({"val_fraction": 1.0}, r"val_fraction: expected a number in \[0, 1\), got 1.0"),
        ({"max_samples": 0}, "max_samples: expected an int >= 1, got 0"),
        ({"seed": 1.5}, "seed: expected an int, got 1.5"),
    ],
)
def test_split_rejects_bad_options(sample, options, message):
    with pytest.raises(ValueError, match=message):
        split_problems(sample, **options)


def test_val_size_larger_than_the_data_is_an_error(sample):
    with pytest.raises(ValueError, match=r"val_size=100 .* smaller than the 64 problems"):
        split_problems(sample, val_size=100)


# ----------------------------------------------------------------------------- writers


def test_write_verl_reads_back_with_pyarrow_and_pandas(sample, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pd = pytest.importorskip("pandas")
    paths = write_verl({"train": sample[:60], "val": sample[60:]}, tmp_path / "verl")
    assert paths == [tmp_path / "verl" / "train.parquet", tmp_path / "verl" / "val.parquet"]
    schema = pq.read_schema(paths[0])
    assert schema.names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert schema.field("reward_model").type == pa.struct(
        [("ground_truth", pa.string()), ("style", pa.string())]
    )
    assert schema.field("extra_info").type.field("index").type == pa.string()
    frame = pd.read_parquet(paths[1])
    assert len(frame) == 4
    row = frame.iloc[0]
    problem = sample[60]
    assert row["data_source"] == "math_dapo"
    assert row["ability"] == "MATH"
    assert [dict(m) for m in row["prompt"]] == [
        {"content": dapo_prompt(problem.problem), "role": "user"}
    ]
    assert row["reward_model"] == {
        "ground_truth": problem.answer,
        "style": "rule-lighteval/MATH_v2",
    }
    assert row["extra_info"] == {
        "index": problem.index,
        "raw_problem": problem.problem,
        "split": "val",
    }
    assert not list((tmp_path / "verl").glob("*.partial"))
    # What we wrote loads back as the same problems.
    assert load_problems(paths[0]) == sample[:60]


def test_write_trl_reads_back_with_datasets(sample, tmp_path):
    paths = write_trl({"train": sample[:50], "val": sample[50:]}, tmp_path / "trl")
    loaded = load_back("parquet", {p.stem: str(p) for p in paths}, tmp_path / "cache")
    assert {name: len(split) for name, split in loaded.items()} == {"train": 50, "val": 14}
    train = loaded["train"]
    assert train.column_names == ["prompt", "solution"]
    assert str(train.features["solution"].dtype) == "string"
    assert train[0] == {"prompt": sample[0].prompt_messages, "solution": sample[0].answer}
    assert train["solution"] == [p.answer for p in sample[:50]]


def test_write_openrlhf_reads_back_with_datasets(sample, tmp_path):
    (path,) = write_openrlhf({"train": sample, "val": []}, tmp_path / "openrlhf")
    assert path.name == "train.jsonl"  # an empty split writes no file
    assert all(sorted(row) == ["label", "prompt"] for row in read_jsonl(path))
    loaded = load_back("json", {"train": str(path)}, tmp_path / "cache")["train"]
    assert str(loaded.features["label"].dtype) == "string"  # "-11" stays a string
    assert loaded["label"] == [p.answer for p in sample]
    assert loaded[1]["prompt"] == [{"role": "user", "content": dapo_prompt(sample[1].problem)}]
    # Read as a source again (the prompt/label schema), it gives the same problems.
    again = load_problems(path)
    assert [(p.problem, p.answer, p.prompt_messages) for p in again] == [
        (p.problem, p.answer, p.prompt_messages) for p in sample
    ]


@pytest.mark.parametrize("writer", [write_verl, write_trl, write_openrlhf, write_tunix])
def test_writers_reject_bad_splits(sample, tmp_path, writer):
    with pytest.raises(ValueError, match="splits: nothing to write, every split is empty"):
        writer({"train": []}, tmp_path)
    with pytest.raises(
        ValueError, match=re.escape("split names must be letters, digits or _, got '../x'")
    ):
        writer({"../x": sample}, tmp_path)
    with pytest.raises(TypeError, match="splits: expected a mapping of split name to problems"):
        writer(sample, tmp_path)


def test_parse_formats():
    assert parse_formats("all") == ("verl", "trl", "openrlhf", "tunix", "skyrl")
    assert parse_formats(["TRL", "verl", "trl"]) == ("trl", "verl")
    assert parse_formats("verl,") == ("verl",)
    with pytest.raises(
        ValueError, match="formats: expected 'verl', 'trl', 'openrlhf', 'tunix', 'skyrl' or 'all'"
    ):
        parse_formats("verl,nemo")
    with pytest.raises(ValueError, match="expected at least one format name"):
        parse_formats("")


def test_prepare_writes_every_format(tmp_path):
    result = prepare(tmp_path, source=sample_path(), val_fraction=0.125, seed=7)
    assert (len(result.train), len(result.val)) == (56, 8)
    assert {
        name: [p.relative_to(tmp_path).as_posix() for p in paths]
        for name, paths in result.files.items()
    } == {
        "verl": ["verl/train.parquet", "verl/val.parquet"],
        "trl": ["trl/train.parquet", "trl/val.parquet"],
        "openrlhf": ["openrlhf/train.jsonl", "openrlhf/val.jsonl"],
        "tunix": ["tunix/train.jsonl", "tunix/val.jsonl"],
        "skyrl": ["skyrl/train.jsonl", "skyrl/val.jsonl"],
    }
    assert [row["label"] for row in read_jsonl(tmp_path / "openrlhf" / "val.jsonl")] == [
        p.answer for p in result.val
    ]
    tunix = read_jsonl(tmp_path / "tunix" / "val.jsonl")
    assert [row["answer"] for row in tunix] == [p.answer for p in result.val]
    assert [row["prompt"] for row in tunix] == [
        row["prompt"] for row in read_jsonl(tmp_path / "openrlhf" / "val.jsonl")
    ]
    skyrl = read_jsonl(tmp_path / "skyrl" / "val.jsonl")
    assert [row["reward_model"]["ground_truth"] for row in skyrl] == [p.answer for p in result.val]
    assert {row["env_class"] for row in skyrl} == {"advbudget_dapo"}
    # The same seed, the same split.
    again = prepare(tmp_path / "again", source=sample_path(), val_fraction=0.125, seed=7)
    assert (again.train, again.val) == (result.train, result.val)


def test_prepare_checks_options_before_reading(tmp_path):
    missing = tmp_path / "missing.parquet"
    with pytest.raises(ValueError, match=r"formats: .* got 'csv'"):
        prepare(tmp_path, source=missing, formats="csv")
    with pytest.raises(ValueError, match="val_size: expected an int >= 0"):
        prepare(tmp_path, source=missing, val_size=-3)
    with pytest.raises(ValueError, match=r"val_size=65 .* smaller than the 64 problems"):
        prepare(tmp_path, source=sample_path(), val_size=65)
    assert not list(tmp_path.iterdir())  # nothing written


# ----------------------------------------------------------------------------- bad input


def test_missing_columns_name_the_file_the_column_and_what_was_found(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"problem": "x?", "solution": "1"}])
    with pytest.raises(DataError) as error:
        load_problems(path)
    message = str(error.value)
    assert str(path) in message
    assert "missing column 'answer' (problem/answer)" in message
    assert "found columns ['problem', 'solution']" in message

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"question": ["x"], "prompt": ["y"]}), tmp_path / "bad.parquet")
    with pytest.raises(
        DataError,
        match=r"bad.parquet: missing column 'reward_model' \(DAPO/verl\) or column 'solution'",
    ):
        load_problems(tmp_path / "bad.parquet")


def test_a_row_missing_a_key_names_its_line(tmp_path):
    path = write_jsonl(tmp_path / "k.jsonl", [{"problem": "a", "answer": "1"}, {"problem": "b"}])
    with pytest.raises(
        DataError, match=r"k.jsonl, line 2: missing 'answer'; found keys \['problem'\]"
    ):
        load_problems(path)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("", r"line 2: answer is empty \(''\)"),
        ("   ", r"line 2: answer is empty"),
        (None, r"line 2: answer is missing \(None\)"),
        (2.0, r"line 2: answer must be a string \(or an int\), got float 2.0"),
        (True, r"line 2: answer must be a string \(or an int\), got bool True"),
        ([1], r"line 2: answer must be a string \(or an int\), got list"),
    ],
)
def test_bad_answers_name_the_row(tmp_path, answer, message):
    rows = [{"problem": "ok?", "answer": "1"}, {"problem": "bad?", "answer": answer}]
    with pytest.raises(DataError, match=message):
        load_problems(write_jsonl(tmp_path / "a.jsonl", rows))


def test_bad_dapo_ground_truths_name_the_parquet_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [dapo_row("a", 1.5, index="a"), dapo_row("b", 2.0, index="b")]
    pq.write_table(pa.Table.from_pylist(rows[1:] + rows[:1]), tmp_path / "f.parquet")
    with pytest.raises(
        DataError,
        match=r"f\.parquet, row 0: reward_model\.ground_truth must be a string \(or an int\), "
        r"got float 2\.0",
    ):
        load_problems(tmp_path / "f.parquet")
    no_truth = dapo_row("a", "1")
    no_truth["reward_model"] = {"style": "x"}
    with pytest.raises(
        DataError, match="line 1: reward_model must be a mapping with a 'ground_truth'"
    ):
        load_problems(write_jsonl(tmp_path / "g.jsonl", [no_truth]))


def test_a_line_that_is_not_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"problem": "a", "answer": "1"}\n\n{"problem": "b", "answer": \n')
    with pytest.raises(DataError, match=r"broken.jsonl, line 3: not valid JSON \(Expecting value"):
        load_problems(path)
    path.write_text('{"problem": "a", "answer": "1"}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"broken\.jsonl, line 2: expected a JSON object, got list"):
        load_problems(path)
    array = tmp_path / "broken.json"
    array.write_text('[\n{"problem": "a", "answer": "1"},\n{"problem": }\n]')
    with pytest.raises(DataError, match=r"broken.json, line 3: not valid JSON"):
        load_problems(array)


def test_bad_prompts_name_the_row(tmp_path):
    rows = [{"prompt": [{"role": "user"}], "label": "1"}]
    with pytest.raises(
        DataError, match=r"line 1: prompt\[0\] must be a mapping with string 'role' and 'content'"
    ):
        load_problems(write_jsonl(tmp_path / "m.jsonl", rows))
    rows = [{"prompt": [{"role": "system", "content": "hi"}], "label": "1"}]
    with pytest.raises(
        DataError, match=r"line 1: prompt has no user message; roles found \['system'\]"
    ):
        load_problems(write_jsonl(tmp_path / "n.jsonl", rows))
    rows = [{"prompt": 3, "label": "1"}]
    with pytest.raises(
        DataError, match="line 1: prompt must be a string or a list of chat messages, got int"
    ):
        load_problems(write_jsonl(tmp_path / "o.jsonl", rows))
    rows = [{"prompt": dapo_prompt(" "), "label": "1"}]
    with pytest.raises(DataError, match="line 1: prompt is empty"):
        load_problems(write_jsonl(tmp_path / "p.jsonl", rows))


def test_bad_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"source: no such file '.*nope\.jsonl'"):
        load_problems(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match="source: no such file"):
        load_problems(str(tmp_path / "nope.parquet"))
    (tmp_path / "data.csv").write_text("problem,answer\n")
    with pytest.raises(
        DataError, match=r"is not a .parquet, .jsonl or .json file \(suffix '.csv'\)"
    ):
        load_problems(tmp_path / "data.csv")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match=r"empty\.jsonl: no rows"):
        load_problems(tmp_path / "empty.jsonl")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"junk\.parquet: not a readable parquet file"):
        load_problems(tmp_path / "junk.parquet")


# ----------------------------------------------------------------------------- real data


@needs_aime
def test_real_aime_file_loads_and_deduplicates_to_30():
    pd = pytest.importorskip("pandas")
    frame = pd.read_parquet(AIME)
    problems = load_problems(AIME)
    assert len(problems) == len(frame) == 960
    for problem, (_, row) in zip(problems, frame.iterrows(), strict=True):
        assert problem.problem == row["extra_info"]["raw_problem"]
        assert problem.answer == row["reward_model"]["ground_truth"]
        assert isinstance(problem.answer, str)
        assert problem.index == str(row["extra_info"]["index"])
        assert problem.prompt_messages == [dict(m) for m in row["prompt"]]
        # The template alone gives back the same problem text.
        assert extract_problem(row["prompt"][0]["content"]) == problem.problem
    unique, report = deduplicate(problems)
    assert (report.rows_before, report.rows_after, report.conflicts) == (960, 30, 0)
    assert sorted(int(p.index) for p in unique) == list(range(30))
    assert len({p.problem for p in unique}) == 30


@needs_aime
def test_real_aime_file_converts_to_all_three_formats(tmp_path):
    pd = pytest.importorskip("pandas")
    truth = {str(row["extra_info"]["index"]): row for _, row in pd.read_parquet(AIME).iterrows()}
    result = prepare(tmp_path, source=AIME, val_size=6, seed=1)
    assert (len(result.train), len(result.val)) == (24, 6)

    verl = pd.concat([pd.read_parquet(p) for p in result.files["verl"]], ignore_index=True)
    assert len(verl) == 30
    for _, row in verl.iterrows():
        original = truth[row["extra_info"]["index"]]
        assert [dict(m) for m in row["prompt"]] == [dict(m) for m in original["prompt"]]
        assert row["reward_model"] == dict(original["reward_model"])
        assert row["extra_info"]["raw_problem"] == original["extra_info"]["raw_problem"]
        assert row["data_source"] == "math_dapo"

    trl = load_back("parquet", {p.stem: str(p) for p in result.files["trl"]}, tmp_path / "c1")
    openrlhf = load_back(
        "json", {p.stem: str(p) for p in result.files["openrlhf"]}, tmp_path / "c2"
    )
    for split, problems in (("train", result.train), ("val", result.val)):
        answers = [p.answer for p in problems]
        assert trl[split]["solution"] == answers
        assert openrlhf[split]["label"] == answers
        assert [m[0]["content"] for m in openrlhf[split]["prompt"]] == [
            dapo_prompt(truth[p.index]["extra_info"]["raw_problem"]) for p in problems
        ]
    assert all(isinstance(a, str) for a in trl["train"]["solution"])


@needs_aime
def test_real_aime_file_through_the_hub_code_path(monkeypatch, tmp_path):
    datasets = pytest.importorskip("datasets")

    def fake_load_dataset(path, name=None, *, split=None):
        assert (path, name, split) == ("BytedTsinghua-SIA/AIME-2024", None, "train")
        return datasets.Dataset.from_parquet(str(AIME), cache_dir=str(tmp_path))

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    from_hub = load_problems("BytedTsinghua-SIA/AIME-2024")
    assert from_hub == load_problems(AIME)


@needs_aime
def test_real_aime_file_without_raw_problem_uses_the_template(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(AIME)
    rows = table.to_pylist()
    for row in rows:
        row["extra_info"] = {"index": row["extra_info"]["index"]}
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "stripped.parquet")
    assert [p.problem for p in load_problems(tmp_path / "stripped.parquet")] == [
        row["extra_info"]["raw_problem"] for row in table.to_pylist()
    ]


# ----------------------------------------------------------------------------- CLI


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["prepare", *args])


def test_cli_prepares_the_bundled_sample(tmp_path):
    result = invoke("--sample", "-o", str(tmp_path), "--val-size", "4", "--max-samples", "40")
    assert result.exit_code == 0, result.output
    for text in ("rows read", "64", "train", "36", "validation", "Files written"):
        assert text in result.output
    assert len(read_jsonl(tmp_path / "openrlhf" / "train.jsonl")) == 36
    assert len(read_jsonl(tmp_path / "openrlhf" / "val.jsonl")) == 4
    assert (tmp_path / "verl" / "val.parquet").exists()
    assert (tmp_path / "trl" / "train.parquet").exists()


@needs_aime
def test_cli_prepares_the_real_file(tmp_path):
    result = invoke("--source", str(AIME), "-o", str(tmp_path), "--format", "verl")
    assert result.exit_code == 0, result.output
    assert re.search(r"rows read\s*│\s*960", result.output)
    assert re.search(r"unique indices \(extra_info\.index\)\s*│\s*30", result.output)
    assert re.search(r"unique problem texts \(kept\)\s*│\s*30", result.output)
    assert re.search(r"rows dropped as repeats\s*│\s*930", result.output)
    assert sorted(p.name for p in tmp_path.rglob("*.*")) == ["train.parquet"]


def test_cli_mounts_as_a_sub_command(tmp_path):
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """Root."""

    root.add_typer(app, name="data")
    result = CliRunner().invoke(
        root, ["data", "prepare", "--sample", "-o", str(tmp_path), "--format", "openrlhf"]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "openrlhf" / "train.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--sample", "--format", "rllib"], 2, "got 'rllib'"),
        (["--sample", "--val-size", "64"], 1, "val_size=64 leaves no training problem"),
        (["--sample", "--val-size", "2", "--val-fraction", "0.5"], 2, "give one of them"),
        (["--sample", "--source", "x.jsonl"], 2, "give --source or --sample, not both"),
        (["--source", "nope/missing.parquet"], 1, "no such file 'nope/missing.parquet'"),
    ],
)
def test_cli_rejects_bad_input(tmp_path, args, code, message):
    result = invoke("-o", str(tmp_path), *args)
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())


# ----------------------------------------------------------------------------- dedup on text


def test_deduplicate_on_normalised_text_across_indices(tmp_path):
    """DAPO-Math-17K gives one text several extra_info.index values: one problem."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [
        dapo_row("What is $6 \\times 7$?", "42", index="a"),
        dapo_row("What is $6 \\times 7$?", "42", index="b"),  # same text, another index
        dapo_row("What  is\n$6 \\times 7$? ", "42", index="c", raw=False),  # spacing only
        dapo_row("Neg?", "-3", index="d"),
        dapo_row("Neg?", "-3", index="d"),  # the same index twice
        dapo_row("neg?", "-3", index="e"),  # case is kept: another problem
        dapo_row("Neg?", "-4", index="f"),  # same text, another answer: a conflict
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    unique, report = deduplicate(load_problems(tmp_path / "d.parquet"))
    assert [(p.index, p.answer) for p in unique] == [("a", "42"), ("d", "-3"), ("e", "-3")]
    assert report == DedupReport(rows_before=7, rows_after=3, conflicts=1, unique_indices=6)
    assert (report.unique_texts, report.removed) == (3, 4)
    assert dict(report.summary()) == {
        "rows read": "7",
        "unique indices (extra_info.index)": "6",
        "unique problem texts (kept)": "3",
        "rows dropped as repeats": "4",
        "dropped repeats with a different answer": "1",
    }
    result = prepare(tmp_path / "out", source=tmp_path / "d.parquet", formats="trl")
    assert result.dedup == report
    assert len(result.train) == 3


@needs_aime
def test_real_aime_file_counts_indices_and_texts():
    _, report = deduplicate(load_problems(AIME))
    assert (report.rows_before, report.unique_indices, report.unique_texts) == (960, 30, 30)
    assert report.removed == 930
