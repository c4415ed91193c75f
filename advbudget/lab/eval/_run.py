"""Generate, grade, score: the evaluation protocol of the paper, end to end.

Generations are written as JSONL, one problem a line (``benchmark``, ``index``,
``problem``, ``answer``, ``samples``, ``correct``), so that a run can be re-graded later
without a GPU (:func:`score_generations`). They are appended as each problem is done
(flushed and synced to disk), beside ``settings.json`` (the run's settings), so that a
crashed or interrupted run continues with ``resume=True`` (``--resume``): finished
problems are kept, a torn last line is dropped, and the settings must match.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from advbudget._io import atomic_write

from ._benchmarks import EvalProblem, load_benchmark, read_jsonl
from ._generate import Backend, Generator, make_generator
from ._metrics import avg_at_k, mean_pass_at_k

GRADERS = ("math_verify", "dapo")
GENERATIONS = "generations.jsonl"
SETTINGS = "settings.json"
SCORES = "scores.json"
# The settings a resumed run must share with the run it continues.
RESUME_KEYS = (
    "model", "benchmarks", "n", "ks", "temperature", "max_new_tokens", "seed", "grader",
    "chat_template_kwargs",
)  # fmt: skip


class ResumeError(ValueError):
    """A generations file that cannot be continued (or must not be overwritten)."""


@dataclass(frozen=True)
class BenchmarkScore:
    """avg@n and pass@k of one benchmark."""

    benchmark: str
    problems: int
    samples_per_problem: int
    avg: float
    pass_at: dict[int, float]


@dataclass
class EvalReport:
    """Scores per benchmark and their mean over benchmarks (the paper's "average")."""

    scores: list[BenchmarkScore]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def average(self) -> BenchmarkScore:
        ks = sorted(set.intersection(*(set(s.pass_at) for s in self.scores)))
        return BenchmarkScore(
            benchmark="average",
            problems=sum(s.problems for s in self.scores),
            samples_per_problem=min(s.samples_per_problem for s in self.scores),
            avg=sum(s.avg for s in self.scores) / len(self.scores),
            pass_at={k: sum(s.pass_at[k] for s in self.scores) / len(self.scores) for k in ks},
        )

    def to_dict(self) -> dict[str, Any]:
        rows = [*self.scores, self.average]
        return {
            "config": self.config,
            "benchmarks": {
                s.benchmark: {**asdict(s), "pass_at": {str(k): v for k, v in s.pass_at.items()}}
                for s in rows
            },
        }


def grade(samples: Sequence[str], answer: str, grader: str = "math_verify") -> list[bool]:
    """Grade each sample against the ground truth with ``grader`` (math_verify or dapo).

    Examples:
        >>> from advbudget.lab.eval import grade
        >>> grade(["... so Answer: 12", "Answer: 13"], "12", grader="dapo")
        [True, False]
    """
    from advbudget.rewards import is_correct

    if grader not in GRADERS:
        raise ValueError(f"grader: expected one of {GRADERS}, got {grader!r}")
    return [is_correct(sample, answer, method=grader) for sample in samples]


def score(records: Iterable[dict[str, Any]], ks: Sequence[int] = ()) -> list[BenchmarkScore]:
    """Scores per benchmark from graded records (``benchmark``, ``correct`` lists).

    ``ks`` are the pass@k to report; each must be at most the samples per problem.

    Examples:
        >>> from advbudget.lab.eval import score
        >>> records = [{"benchmark": "aime24", "correct": [True, False]},
        ...            {"benchmark": "aime24", "correct": [False, False]}]
        >>> [(s.benchmark, s.avg, s.pass_at) for s in score(records, ks=[2])]
        [('aime24', 0.25, {2: 0.5})]
    """
    by_benchmark: dict[str, list[list[bool]]] = {}
    for record in records:
        by_benchmark.setdefault(record["benchmark"], []).append(list(record["correct"]))
    scores = []
    for name, correct in by_benchmark.items():
        sizes = {len(c) for c in correct}
        if len(sizes) != 1:
            raise ValueError(
                f"{name}: expected the same number of samples for every problem, "
                f"got {sorted(sizes)}"
            )
        n = sizes.pop()
        counts = [sum(c) for c in correct]
        for k in ks:
            if k > n:
                raise ValueError(
                    f"k: expected pass@k with k <= n = {n} samples per problem ({name}), got {k}"
                )
        scores.append(
            BenchmarkScore(
                benchmark=name,
                problems=len(counts),
                samples_per_problem=n,
                avg=avg_at_k(counts, n),
                pass_at={k: mean_pass_at_k(counts, n, k) for k in ks},
            )
        )
    if not scores:
        raise ValueError("records: expected at least one graded problem, got none")
    return scores


def problem_messages(problem: EvalProblem) -> list[dict[str, str]]:
    """The chat prompt of a problem: the DAPO template the model was trained with."""
    from ..data import dapo_prompt

    return [{"role": "user", "content": dapo_prompt(problem.problem)}]


def evaluate(
    model: str,
    benchmarks: Sequence[str],
    *,
    n: int = 8,
    ks: Sequence[int] = (8,),
    temperature: float = 0.7,
    max_new_tokens: int = 8192,
    grader: str = "math_verify",
    backend: Backend = "auto",
    output_dir: Path | None = None,
    seed: int = 0,
    generator: Generator | None = None,
    show_progress: bool = True,
    resume: bool = False,
    **generator_options: Any,
) -> EvalReport:
    """Sample ``n`` answers per problem, grade them, and report avg@n and pass@k.

    Args:
        model: a model path or hub id (loaded by the backend).
        benchmarks: names (``amc23``, ``aime24``, ``aime25``, ``math500``) or JSONL paths.
        n: samples per problem (paper: 8).
        ks: the pass@k to report (each <= n).
        temperature: sampling temperature (paper: 0.7).
        max_new_tokens: the longest answer sampled (paper: 8192).
        grader: ``"math_verify"`` (symbolic equivalence) or ``"dapo"`` (DAPO's strict
            ``Answer:`` rule).
        backend: ``"vllm"``, ``"transformers"`` or ``"auto"``.
        output_dir: where to write ``generations.jsonl`` (a problem at a time),
            ``settings.json`` and, at the end, ``scores.json``. An existing non-empty
            ``generations.jsonl`` there is refused unless ``resume``.
        seed: sampling seed.
        generator: an already built generator (overrides ``backend``).
        show_progress: show a progress bar while generating.
        resume: continue the run whose ``generations.jsonl`` is in ``output_dir``: its
            finished problems are kept (a torn last line is dropped), the rest generated;
            its ``settings.json`` must match these settings (:class:`ResumeError`).
        **generator_options: passed to the backend (``tensor_parallel_size``,
            ``batch_size``, ``chat_template_kwargs``, ...).
    """
    if n < 1:
        raise ValueError(f"n: expected at least one sample per problem, got {n}")
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise ValueError(f"ks: expected pass@k with 1 <= k <= n = {n}, got {bad}")
    if grader not in GRADERS:
        raise ValueError(f"grader: expected one of {GRADERS}, got {grader!r}")
    settings = {
        "model": model,
        "benchmarks": list(benchmarks),
        "n": n,
        "ks": list(ks),
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
        "grader": grader,
        "chat_template_kwargs": dict(generator_options.get("chat_template_kwargs") or {}),
    }
    problems = {spec: load_benchmark(spec) for spec in benchmarks}
    journal = None if output_dir is None else _Journal(Path(output_dir), settings, resume)
    try:
        if journal is not None:
            journal.open(problems)  # checks everything before the model is loaded
        if generator is None:
            generator = make_generator(backend, model, seed=seed, **generator_options)
        records = _generate_all(
            generator, problems, journal, n=n, temperature=temperature,
            max_new_tokens=max_new_tokens, grader=grader, seed=seed,
            show_progress=show_progress,
        )  # fmt: skip
    except BaseException:
        if journal is not None:
            journal.abandon()
        raise
    if journal is not None:
        journal.close()
    config = {k: v for k, v in settings.items() if k != "chat_template_kwargs"}
    config["generator"] = type(generator).__name__
    report = EvalReport(score(records, ks), config)
    if output_dir is not None:
        write_scores(Path(output_dir), report)
    return report


def _generate_all(
    generator: Generator,
    problems: dict[str, list[EvalProblem]],
    journal: _Journal | None,
    *,
    n: int,
    temperature: float,
    max_new_tokens: int,
    grader: str,
    seed: int,
    show_progress: bool,
) -> list[dict[str, Any]]:
    """Every problem's graded record, in benchmark order; new ones go to the journal.

    Problems go to the generator in chunks of its ``chunk_size`` (or ``batch_size``),
    counted from the start of each benchmark, each chunk with its own seed: a resumed run
    regenerates exactly the chunks an uninterrupted one would (same prompts, same seed),
    so it writes the same samples.
    """
    done = {} if journal is None else journal.done
    takes_seed = "seed" in inspect.signature(generator.generate).parameters
    chunk = getattr(generator, "chunk_size", None) or getattr(generator, "batch_size", None)
    records: list[dict[str, Any]] = []
    total = sum(len(p) for p in problems.values())
    with _progress(show_progress, total) as advance:
        for name, items in problems.items():
            size = chunk or len(items)
            for start in range(0, len(items), size):
                part = items[start : start + size]
                todo = [p for p in part if (p.benchmark, p.index) not in done]
                if todo:
                    options: dict[str, Any] = {}
                    if takes_seed:
                        options["seed"] = _chunk_seed(seed, name, start)
                    completions = generator.generate(
                        [problem_messages(p) for p in part],
                        n=n,
                        temperature=temperature,
                        max_new_tokens=max_new_tokens,
                        **options,
                    )
                    for problem, samples in zip(part, completions, strict=True):
                        if (problem.benchmark, problem.index) in done:
                            continue
                        record = {
                            **asdict(problem),
                            "samples": samples,
                            "correct": grade(samples, problem.answer, grader),
                        }
                        if journal is not None:
                            journal.append(record)
                        done[problem.benchmark, problem.index] = record
                advance(len(part))
                records += [done[p.benchmark, p.index] for p in part]
    return records


def _chunk_seed(seed: int, benchmark: str, start: int) -> int:
    """The sampling seed of the chunk of ``benchmark`` starting at problem ``start``."""
    return zlib.crc32(f"{seed}:{benchmark}:{start}".encode()) & 0x7FFFFFFF


class _Journal:
    """``generations.jsonl`` written a problem at a time, and ``settings.json`` beside it."""

    def __init__(self, folder: Path, settings: dict[str, Any], resume: bool):
        self.folder, self.settings, self.resume = folder, settings, resume
        self.path = folder / GENERATIONS
        self.settings_path = folder / SETTINGS
        self.done: dict[tuple[str, int], dict[str, Any]] = {}
        self.file: Any = None
        self.created: list[Path] = []
        self.written = 0
        self.fresh = False  # whether this run started the files (and may remove them)

    def open(self, problems: dict[str, list[EvalProblem]]) -> None:
        started = self.path.exists() and self.path.stat().st_size > 0
        self.fresh = False
        if started and not self.resume:
            count = len(_complete_lines(self.path.read_bytes())[0])
            raise ResumeError(
                f"{self.path} already holds {count} problems of an earlier run: pass --resume "
                "to continue it, or another --output-dir"
            )
        if started:
            self._check_settings()
            self._load(problems)
        missing = []
        folder = self.folder
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        self.folder.mkdir(parents=True, exist_ok=True)
        self.created = missing
        self.fresh = not started
        if not started:
            atomic_write(self.settings_path, json.dumps(self.settings, indent=2) + "\n")
        self.file = self.path.open("ab")

    def _check_settings(self) -> None:
        if not self.settings_path.exists():
            raise ResumeError(
                f"--resume: {self.path} has no {SETTINGS} beside it, so its settings cannot "
                "be checked; use another --output-dir"
            )
        try:
            recorded = json.loads(self.settings_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ResumeError(f"--resume: {self.settings_path} is not valid JSON") from None
        differ = [
            f"{key} {recorded.get(key)!r} (now {self.settings[key]!r})"
            for key in RESUME_KEYS
            if recorded.get(key) != self.settings[key]
        ]
        if differ:
            raise ResumeError(
                f"--resume: {self.path} was written with other settings: {'; '.join(differ)}; "
                "rerun with those, or use another --output-dir"
            )

    def _load(self, problems: dict[str, list[EvalProblem]]) -> None:
        data = self.path.read_bytes()
        lines, good = _complete_lines(data)
        by_key = {(p.benchmark, p.index): p for items in problems.values() for p in items}
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if number == len(lines):  # a torn last write that ended in a newline
                    good = data.rindex(line, 0, good)
                    break
                raise ResumeError(
                    f"--resume: {self.path}, line {number}: not valid JSON (a corrupt line, "
                    "not a torn last write)"
                ) from None
            key = (record.get("benchmark"), record.get("index"))
            problem = by_key.get(key)
            if problem is None or record.get("problem") != problem.problem:
                raise ResumeError(
                    f"--resume: {self.path}, line {number}: problem {key} is not in these "
                    "benchmarks"
                )
            if key in self.done:
                raise ResumeError(f"--resume: {self.path}, line {number}: problem {key} twice")
            samples = record.get("samples")
            if not isinstance(samples, list) or len(samples) != self.settings["n"]:
                raise ResumeError(
                    f"--resume: {self.path}, line {number}: expected {self.settings['n']} samples"
                )
            self.done[key] = record
        if good < len(data):  # drop the torn tail before appending
            with self.path.open("r+b") as file:
                file.truncate(good)
                os.fsync(file.fileno())

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            self.file.write(line)
            self.file.flush()
            os.fsync(self.file.fileno())
        except OSError as error:
            if error.filename is None:
                raise OSError(error.errno, error.strerror or str(error), str(self.path)) from error
            raise
        self.written += 1

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def abandon(self) -> None:
        """After a failure: keep what was written (for --resume), or, if nothing was
        (and nothing came before), remove what this run created."""
        self.close()
        if self.written or self.done or not self.fresh:
            return
        if self.path.exists() and self.path.stat().st_size == 0:
            with contextlib.suppress(OSError):
                self.path.unlink()
        with contextlib.suppress(OSError):
            self.settings_path.unlink()
        for folder in self.created:
            with contextlib.suppress(OSError):
                folder.rmdir()


def _complete_lines(data: bytes) -> tuple[list[bytes], int]:
    """The newline-terminated non-blank lines of ``data`` and the bytes they span; a last
    line without its newline (torn by a crash) is left out."""
    end = data.rfind(b"\n") + 1
    return [line for line in data[:end].split(b"\n") if line.strip()], end


def score_generations(
    path: Path, *, ks: Sequence[int] = (), grader: str = "math_verify"
) -> tuple[list[dict[str, Any]], EvalReport]:
    """Re-grade a ``generations.jsonl`` (``benchmark``, ``answer``, ``samples`` per line).

    Examples:
        >>> import json, tempfile, pathlib
        >>> from advbudget.lab.eval import score_generations
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "generations.jsonl"
        >>> line = {"benchmark": "b", "answer": "4", "samples": ["Answer: 4", "Answer: 5"]}
        >>> _ = path.write_text(json.dumps(line) + "\\n")
        >>> records, report = score_generations(path, ks=[2], grader="dapo")
        >>> records[0]["correct"], report.scores[0].avg
        ([True, False], 0.5)
    """
    if grader not in GRADERS:
        raise ValueError(f"grader: expected one of {GRADERS}, got {grader!r}")
    records = []
    for number, record in read_jsonl(Path(path)):
        for key in ("benchmark", "answer", "samples"):
            if key not in record:
                raise ValueError(f"{path}, line {number}: missing field {key!r}")
        samples = record["samples"]
        if not isinstance(samples, list) or not all(isinstance(s, str) for s in samples):
            raise ValueError(f"{path}, line {number}: 'samples' must be a list of strings")
        if not samples:
            raise ValueError(f"{path}, line {number}: 'samples' is empty")
        record["correct"] = grade(samples, str(record["answer"]), grader)
        records.append(record)
    if not records:
        raise ValueError(f"{path}: no generations found")
    return records, EvalReport(score(records, ks), {"generations": str(path), "grader": grader})


def write_outputs(output_dir: Path, records: list[dict[str, Any]], report: EvalReport) -> None:
    """``generations.jsonl`` (re-gradable) and ``scores.json`` under ``output_dir``, each
    written beside its place and renamed into it."""
    output_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    atomic_write(output_dir / GENERATIONS, lines)
    write_scores(output_dir, report)


def write_scores(output_dir: Path, report: EvalReport) -> None:
    """``scores.json`` (what ``advbudget compare`` reads), written beside its place and
    renamed into it."""
    atomic_write(output_dir / SCORES, json.dumps(report.to_dict(), indent=2) + "\n")


class _progress:
    """A rich progress bar over problems (or nothing), as a context manager."""

    def __init__(self, show: bool, total: int):
        self.show, self.total = show, total

    def __enter__(self) -> Any:
        if not self.show:
            return lambda count: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        self.bar.start()
        task = self.bar.add_task("generating", total=self.total)
        return lambda count: self.bar.advance(task, count)

    def __exit__(self, *exc: object) -> None:
        if self.show:
            self.bar.stop()
