"""Generate, grade, score: the evaluation protocol of the paper, end to end.

Generations are written as JSONL, one problem a line (``benchmark``, ``index``,
``problem``, ``answer``, ``samples``, ``correct``), so that a run can be re-graded later
without a GPU (:func:`score_generations`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._benchmarks import EvalProblem, load_benchmark, read_jsonl
from ._generate import Backend, Generator, make_generator
from ._metrics import avg_at_k, mean_pass_at_k

GRADERS = ("math_verify", "dapo")


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
        >>> from advbudget.eval import grade
        >>> grade(["... so Answer: 12", "Answer: 13"], "12", grader="dapo")
        [True, False]
    """
    from ..rewards import is_correct

    if grader not in GRADERS:
        raise ValueError(f"grader: expected one of {GRADERS}, got {grader!r}")
    return [is_correct(sample, answer, method=grader) for sample in samples]


def score(records: Iterable[dict[str, Any]], ks: Sequence[int] = ()) -> list[BenchmarkScore]:
    """Scores per benchmark from graded records (``benchmark``, ``correct`` lists).

    ``ks`` are the pass@k to report; each must be at most the samples per problem.

    Examples:
        >>> from advbudget.eval import score
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
        output_dir: where to write ``generations.jsonl`` and ``scores.json``.
        seed: sampling seed.
        generator: an already built generator (overrides ``backend``).
        show_progress: show a progress bar while generating.
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
    problems = {spec: load_benchmark(spec) for spec in benchmarks}
    if generator is None:
        generator = make_generator(backend, model, seed=seed, **generator_options)
    records = []
    total = sum(len(p) for p in problems.values())
    with _progress(show_progress, total) as advance:
        for items in problems.values():
            completions = generator.generate(
                [problem_messages(p) for p in items],
                n=n,
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                on_progress=advance,
            )
            for problem, samples in zip(items, completions, strict=True):
                records.append(
                    {
                        **asdict(problem),
                        "samples": samples,
                        "correct": grade(samples, problem.answer, grader),
                    }
                )
    config = {
        "model": model,
        "benchmarks": list(benchmarks),
        "n": n,
        "ks": list(ks),
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "grader": grader,
        "seed": seed,
        "generator": type(generator).__name__,
    }
    report = EvalReport(score(records, ks), config)
    if output_dir is not None:
        write_outputs(Path(output_dir), records, report)
    return report


def score_generations(
    path: Path, *, ks: Sequence[int] = (), grader: str = "math_verify"
) -> tuple[list[dict[str, Any]], EvalReport]:
    """Re-grade a ``generations.jsonl`` (``benchmark``, ``answer``, ``samples`` per line).

    Examples:
        >>> import json, tempfile, pathlib
        >>> from advbudget.eval import score_generations
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
                raise ValueError(f"{path}:{number}: missing field {key!r}")
        samples = record["samples"]
        if not isinstance(samples, list) or not all(isinstance(s, str) for s in samples):
            raise ValueError(f"{path}:{number}: 'samples' must be a list of strings")
        if not samples:
            raise ValueError(f"{path}:{number}: 'samples' is empty")
        record["correct"] = grade(samples, str(record["answer"]), grader)
        records.append(record)
    if not records:
        raise ValueError(f"{path}: no generations found")
    return records, EvalReport(score(records, ks), {"generations": str(path), "grader": grader})


def write_outputs(output_dir: Path, records: list[dict[str, Any]], report: EvalReport) -> None:
    """``generations.jsonl`` (re-gradable) and ``scores.json`` under ``output_dir``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    with (output_dir / "generations.jsonl").open("w", encoding="utf-8") as file:
        for record in records:
            file.write(json.dumps(record, ensure_ascii=False) + "\n")
    (output_dir / "scores.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")


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
