"""Reading problems from a hub dataset or a local .parquet / .jsonl / .json file."""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from advbudget.adapters._datafiles import DAPO_DATA_SOURCE

from .._jsonl import json_lines
from ._problems import (
    DAPO_ABILITY,
    DEFAULT_SOURCE,
    DataError,
    Message,
    Problem,
    dapo_prompt,
    extract_problem,
    text_index,
)

LOCAL_SUFFIXES = (".parquet", ".jsonl", ".json")
# Rows are converted batch by batch: the hub file has ~1.79M rows.
BATCH_ROWS = 8192

# (schema, the two columns that identify it, a name for messages), tried in this order.
SCHEMAS: tuple[tuple[str, tuple[str, str], str], ...] = (
    ("dapo", ("prompt", "reward_model"), "DAPO/verl"),
    ("problem", ("problem", "answer"), "problem/answer"),
    ("solution", ("prompt", "solution"), "open-r1"),
    ("label", ("prompt", "label"), "OpenRLHF"),
)

Rows = Iterator[tuple[str, Mapping[str, Any]]]


def load_problems(
    source: str | os.PathLike[str] = DEFAULT_SOURCE,
    *,
    split: str = "train",
    config: str | None = None,
) -> list[Problem]:
    """Read math problems from a hub dataset or a local file, in the order they come.

    Repeats are kept (DAPO-Math-17K repeats each problem ~100 times): pass the result to
    :func:`deduplicate`. Four schemas are recognised from the column names:

    - DAPO / verl: ``prompt`` (chat list or string) and ``reward_model.ground_truth``,
      optional ``data_source``, ``ability`` and ``extra_info.index`` /
      ``extra_info.raw_problem``. The problem text is ``extra_info.raw_problem`` when
      present, else the prompt without DAPO's template (:func:`extract_problem`).
    - ``problem`` and ``answer``: prompted with the DAPO template.
    - ``prompt`` and ``solution`` (``open-r1/DAPO-Math-17k-Processed``).
    - ``prompt`` and ``label`` (OpenRLHF's DAPO copies).

    Ground truths must be non-empty strings; ints are converted (DAPO stores strings),
    anything else (floats, None) is an error naming the row.

    Args:
        source: a hub dataset id (default ``BytedTsinghua-SIA/DAPO-Math-17k``, loaded
            with ``datasets.load_dataset``, which needs the ``datasets`` package and the
            network or its cache), a local dataset folder for ``datasets``, or a
            ``.parquet``, ``.jsonl`` or ``.json`` file (read with pyarrow / json).
        split: the hub split; ignored for a local file.
        config: the hub configuration, e.g. ``"en"`` for open-r1's processed copy.

    Returns:
        One :class:`Problem` per row.

    Raises:
        DataError: a missing column or key, an empty or non-string answer, a line that is
            not JSON; the message names the file, the row or line and what was found.
        FileNotFoundError: ``source`` looks like a file path but no such file exists.

    Examples:
        >>> from advbudget.lab.data import load_problems, sample_path
        >>> problems = load_problems(sample_path("dapo"))
        >>> len(problems), problems[0].problem, problems[0].answer
        (64, 'Compute $32 \\\\div 4 - 19$.', '-11')
    """
    path = _local_file(source)
    if path is None:
        label, columns, rows = _dataset_rows(os.fspath(source), split=split, config=config)
    elif path.suffix.lower() == ".parquet":
        label, columns, rows = _parquet_rows(path)
    else:
        label, columns, rows = _json_rows(path)
    schema = detect_schema(columns, where=label)
    convert = _RowConverter(schema)
    problems = [convert(row, where) for where, row in rows]
    if not problems:
        raise DataError(f"{label}: no rows; expected at least one problem")
    return problems


def detect_schema(columns: Sequence[str], *, where: str = "data") -> str:
    """Which of the known schemas a set of column names is: dapo, problem, solution, label.

    Examples:
        >>> from advbudget.lab.data._load import detect_schema
        >>> detect_schema(["data_source", "prompt", "ability", "reward_model", "extra_info"])
        'dapo'
        >>> detect_schema(["prompt", "label"])
        'label'
    """
    found = set(columns)
    for schema, needed, _ in SCHEMAS:
        if found.issuperset(needed):
            return schema
    # Name what is missing for the schemas the data partly matches, else for all of them.
    partial = [(needed, name) for _, needed, name in SCHEMAS if found.intersection(needed)]
    candidates = partial or [(needed, name) for _, needed, name in SCHEMAS]
    missing = " or ".join(
        f"column {next(c for c in needed if c not in found)!r} ({name})"
        for needed, name in candidates
    )
    expected = "; ".join(f"{' + '.join(map(repr, needed))} ({name})" for _, needed, name in SCHEMAS)
    raise DataError(
        f"{where}: missing {missing}; found columns {sorted(found)}; expected one of: {expected}"
    )


def _local_file(source: str | os.PathLike[str]) -> Path | None:
    """The file to read, or None for a hub id or a dataset folder (datasets reads those)."""
    path = Path(source)
    if path.is_dir():
        return None
    if path.is_file():
        if path.suffix.lower() not in LOCAL_SUFFIXES:
            raise DataError(
                f"source: {str(path)!r} is not a .parquet, .jsonl or .json file "
                f"(suffix {path.suffix!r})"
            )
        return path
    if isinstance(source, os.PathLike) or path.suffix.lower() in LOCAL_SUFFIXES:
        raise FileNotFoundError(f"source: no such file {str(path)!r}")
    return None


def _parquet_rows(path: Path) -> tuple[str, list[str], Rows]:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    label = str(path)
    try:
        columns = list(pq.read_schema(path).names)
    except (pa.ArrowException, OSError) as error:
        raise DataError(f"{label}: not a readable parquet file ({error})") from None

    def rows() -> Rows:
        number = 0
        with pq.ParquetFile(path) as file:
            for batch in file.iter_batches(batch_size=BATCH_ROWS):
                for row in batch.to_pylist():
                    yield f"{label}, row {number}", row
                    number += 1

    return label, columns, rows()


def _json_rows(path: Path) -> tuple[str, list[str], Rows]:
    label = str(path)
    with path.open(encoding="utf-8-sig") as file:
        head = file.read(4096).lstrip()
    # A .json file holds either one JSON array of objects or, like .jsonl, an object a line.
    if path.suffix.lower() == ".json" and head.startswith("["):
        rows = _json_array_rows(path)
    else:
        rows = _json_lines_rows(path)
    first = next(rows, None)
    if first is None:
        raise DataError(f"{label}: no rows; expected at least one JSON object")

    def chained() -> Rows:
        yield first
        yield from rows

    return label, list(first[1]), chained()


def _json_lines_rows(path: Path) -> Rows:
    for number, row in json_lines(path, error=DataError):
        yield f"{path}, line {number}", row


def _json_array_rows(path: Path) -> Rows:
    try:
        items = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as error:
        raise DataError(
            f"{path}, line {error.lineno}: not valid JSON ({error.msg} at column {error.colno})"
        ) from None
    if not isinstance(items, list):
        raise DataError(f"{path}: expected a JSON array of objects, got {type(items).__name__}")
    for number, item in enumerate(items):
        where = f"{path}, item {number}"
        yield where, _as_object(item, where)


def _as_object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def _dataset_rows(source: str, *, split: str, config: str | None) -> tuple[str, list[str], Rows]:
    import datasets  # type: ignore[import-untyped,unused-ignore]

    label = f"{source} (split {split!r})"
    dataset = datasets.load_dataset(source, config, split=split)
    columns = list(dataset.column_names)

    def rows() -> Rows:
        number = 0
        for batch in dataset.iter(batch_size=BATCH_ROWS):
            for values in zip(*(batch[column] for column in columns), strict=True):
                yield f"{label}, row {number}", dict(zip(columns, values, strict=True))
                number += 1

    return label, columns, rows()


class _RowConverter:
    """Turns rows of one schema into Problems, sharing repeated strings between them."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        # The hub file repeats every prompt ~100 times: one copy of each string, not 100.
        self._strings: dict[str, str] = {}

    def share(self, text: str) -> str:
        return self._strings.setdefault(text, text)

    def __call__(self, row: Mapping[str, Any], where: str) -> Problem:
        extra = row.get("extra_info")
        extra = extra if isinstance(extra, Mapping) else {}
        if self.schema == "problem":
            problem = _text(_field(row, "problem", where), where, "problem")
            messages = [{"role": "user", "content": dapo_prompt(problem)}]
            answer = _ground_truth(_field(row, "answer", where), where, "answer")
        else:
            messages, problem = _prompt(_field(row, "prompt", where), where)
            raw_problem = extra.get("raw_problem")
            if isinstance(raw_problem, str) and raw_problem.strip():
                problem = raw_problem
            answer = self._answer(row, where)
        index = extra.get("index")
        return Problem(
            problem=self.share(problem),
            answer=self.share(answer),
            prompt_messages=[
                {"role": self.share(m["role"]), "content": self.share(m["content"])}
                for m in messages
            ],
            index=self.share(str(index)) if index is not None else text_index(messages),
            data_source=_optional_text(row, "data_source", DAPO_DATA_SOURCE),
            ability=_optional_text(row, "ability", DAPO_ABILITY),
        )

    def _answer(self, row: Mapping[str, Any], where: str) -> str:
        if self.schema == "dapo":
            reward_model = _field(row, "reward_model", where)
            if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
                raise DataError(
                    f"{where}: reward_model must be a mapping with a 'ground_truth', got "
                    f"{_clip(repr(reward_model))}"
                )
            return _ground_truth(reward_model["ground_truth"], where, "reward_model.ground_truth")
        key = self.schema  # "solution" or "label"
        return _ground_truth(_field(row, key, where), where, key)


def _field(row: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in row:
        raise DataError(f"{where}: missing {key!r}; found keys {sorted(row)}")
    return row[key]


def _text(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: {field} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise DataError(f"{where}: {field} is empty ({value!r}); expected the problem text")
    return value


def _optional_text(row: Mapping[str, Any], key: str, default: str) -> str:
    value = row.get(key)
    return value if isinstance(value, str) and value else default


def _prompt(value: Any, where: str) -> tuple[list[Message], str]:
    """The chat messages of a prompt and the problem inside it."""
    if isinstance(value, str):
        # A bare problem gets the template; a templated one round-trips unchanged.
        problem = _text(extract_problem(value), where, "prompt")
        return [{"role": "user", "content": dapo_prompt(problem)}], problem
    if isinstance(value, Sequence) or hasattr(value, "tolist"):  # pandas gives numpy arrays
        items = value.tolist() if hasattr(value, "tolist") else list(value)
        messages = [_message(item, where, i) for i, item in enumerate(items)]
        user = [m["content"] for m in messages if m["role"] == "user"]
        if not user:
            raise DataError(
                f"{where}: prompt has no user message; roles found {[m['role'] for m in messages]}"
            )
        return messages, _text(extract_problem(user[-1]), where, "prompt")
    raise DataError(
        f"{where}: prompt must be a string or a list of chat messages, got {type(value).__name__}"
    )


def _message(item: Any, where: str, position: int) -> Message:
    if (
        not isinstance(item, Mapping)
        or not isinstance(item.get("role"), str)
        or not isinstance(item.get("content"), str)
    ):
        raise DataError(
            f"{where}: prompt[{position}] must be a mapping with string 'role' and 'content', "
            f"got {_clip(repr(item))}"
        )
    return {"role": item["role"], "content": item["content"]}


def _ground_truth(value: Any, where: str, field: str) -> str:
    """A ground truth as DAPO stores it: a non-empty string."""
    if isinstance(value, str):
        if not value.strip():
            raise DataError(f"{where}: {field} is empty ({value!r}); expected the answer")
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))  # the same answer; DAPO's reward compares strings
    if value is None:
        raise DataError(f"{where}: {field} is missing (None); expected the answer as a string")
    # A float is ambiguous for a string compare ("3" or "3.0"), so it is not guessed.
    raise DataError(
        f"{where}: {field} must be a string (or an int), got {type(value).__name__} {value!r}"
    )


def _clip(text: str, limit: int = 80) -> str:
    text = text.rstrip("\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
