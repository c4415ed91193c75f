"""From loaded rows to training files: deduplicate, select, split, write."""

from __future__ import annotations

import numbers
import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from advbudget.checks import int_at_least

from ._load import load_problems
from ._problems import DEFAULT_SOURCE, Problem, extract_problem
from ._writers import WRITERS

FORMATS = tuple(WRITERS)  # ("verl", "trl", "openrlhf", "tunix", "skyrl")


@dataclass(frozen=True)
class DedupReport:
    """What :func:`deduplicate` did.

    Attributes:
        rows_before: rows read.
        rows_after: unique problems kept: distinct normalised problem texts
            (:func:`problem_key`).
        conflicts: dropped repeats whose answer differs from the kept row with the same
            text (0 for a clean source; anything else is worth a look).
        unique_indices: distinct :attr:`Problem.index` values among the rows read (DAPO's
            ``extra_info.index``): more than ``rows_after`` when one problem text was
            given several indices, as in DAPO-Math-17K (17,917 indices, ~17.4K texts).

    Examples:
        >>> from advbudget.lab.data import DedupReport
        >>> report = DedupReport(rows_before=960, rows_after=30, conflicts=0, unique_indices=31)
        >>> report.removed, report.unique_texts
        (930, 30)
    """

    rows_before: int
    rows_after: int
    conflicts: int = 0
    unique_indices: int = 0

    @property
    def removed(self) -> int:
        """Rows dropped as repeats."""
        return self.rows_before - self.rows_after

    @property
    def unique_texts(self) -> int:
        """Distinct normalised problem texts: the problems kept (``rows_after``)."""
        return self.rows_after

    def summary(self) -> list[tuple[str, str]]:
        """(label, value) rows for a printed summary: every count, the rule named.

        Examples:
            >>> from advbudget.lab.data import DedupReport
            >>> DedupReport(960, 30, 0, 30).summary()[1]
            ('unique indices (extra_info.index)', '30')
        """
        return [
            ("rows read", f"{self.rows_before:,}"),
            ("unique indices (extra_info.index)", f"{self.unique_indices:,}"),
            ("unique problem texts (kept)", f"{self.rows_after:,}"),
            ("rows dropped as repeats", f"{self.removed:,}"),
            ("dropped repeats with a different answer", f"{self.conflicts:,}"),
        ]


@dataclass(frozen=True)
class PreparedData:
    """What :func:`prepare` read, kept and wrote.

    Attributes:
        source: the hub id or file it read.
        dedup: the :class:`DedupReport`.
        train: the training problems, in file order.
        val: the validation problems (empty without ``val_size`` / ``val_fraction``).
        files: the paths written, by format (``"verl"``, ``"trl"``, ``"openrlhf"``, ``"tunix"``).

    Examples:
        >>> import tempfile
        >>> from advbudget.lab.data import prepare, sample_path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     result = prepare(folder, source=sample_path(), formats="trl")
        >>> len(result.train), len(result.val), sorted(result.files)
        (64, 0, ['trl'])
    """

    source: str
    dedup: DedupReport
    train: list[Problem]
    val: list[Problem]
    files: dict[str, list[Path]] = field(default_factory=dict)


def problem_key(problem: Problem) -> str:
    """What makes two rows the same problem: their normalised problem text.

    The normalisation: the bare problem text (:attr:`Problem.problem`: DAPO's
    ``extra_info.raw_problem``, or the prompt without its template), DAPO's prompt template
    stripped if it is still around it (:func:`extract_problem`), then every run of
    whitespace made one space and the ends stripped. Case, punctuation, LaTeX and Unicode
    are kept as they are. The source's index is not part of it: DAPO-Math-17K gives some
    texts several ``extra_info.index`` values.

    Examples:
        >>> from advbudget.lab.data import Problem, dapo_prompt
        >>> from advbudget.lab.data._prepare import problem_key
        >>> problem_key(Problem.from_text(" What  is $2+2$? ", "4", index="7"))
        'What is $2+2$?'
        >>> problem_key(Problem.from_text(dapo_prompt("What is $2+2$?"), "4"))
        'What is $2+2$?'
        >>> problem_key(Problem.from_text("what is $2+2$?", "4"))  # case is kept
        'what is $2+2$?'
    """
    return " ".join(extract_problem(problem.problem).split())


def deduplicate(problems: Iterable[Problem]) -> tuple[list[Problem], DedupReport]:
    """Keep the first row of each problem text, in order; count what was dropped.

    Rows are the same problem when their normalised problem texts are equal
    (:func:`problem_key`: template stripped, whitespace collapsed, case kept), whatever
    their indices: the kept row keeps its own :attr:`Problem.index`. The report counts
    the rows read, the distinct indices, the distinct texts (the problems kept) and the
    dropped repeats whose answer differs from the kept one. DAPO-Math-17K's ~1.79M rows
    hold 17,917 distinct ``extra_info.index`` values but ~17.4K distinct problem texts.

    Returns:
        The unique problems and a :class:`DedupReport`.

    Examples:
        >>> from advbudget.lab.data import Problem, deduplicate
        >>> rows = [Problem.from_text("What is $2+2$?", "4", index="0"),
        ...         Problem.from_text("What is  $2+2$?", "4", index="1"),
        ...         Problem.from_text("$3-5$?", -2, index="2")]
        >>> unique, report = deduplicate(rows * 3)
        >>> [p.answer for p in unique], [p.index for p in unique]
        (['4', '-2'], ['0', '2'])
        >>> report
        DedupReport(rows_before=9, rows_after=2, conflicts=0, unique_indices=3)
    """
    kept: dict[str, Problem] = {}
    indices: set[str] = set()
    rows = conflicts = 0
    for problem in problems:
        rows += 1
        indices.add(problem.index)
        first = kept.setdefault(problem_key(problem), problem)
        if first is not problem and first.answer != problem.answer:
            conflicts += 1
    return list(kept.values()), DedupReport(rows, len(kept), conflicts, len(indices))


def split_problems(
    problems: Sequence[Problem],
    *,
    val_size: int | None = None,
    val_fraction: float | None = None,
    max_samples: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
) -> tuple[list[Problem], list[Problem]]:
    """Shuffle (seeded), keep at most ``max_samples``, then hold out a validation set.

    The order is: shuffle all problems with ``random.Random(seed)``, take the first
    ``max_samples``, and put the last ``val_size`` (or ``round(n * val_fraction)``, at
    least 1) of those in the validation set. The same inputs and seed give the same
    split on every machine.

    Args:
        problems: usually the output of :func:`deduplicate`.
        val_size: how many problems to hold out (0 or None: none).
        val_fraction: the share to hold out, in [0, 1); not with ``val_size``.
        max_samples: at most this many problems in train + validation.
        seed: the shuffle seed.
        shuffle: False keeps the source order (then validation is the tail).

    Returns:
        ``(train, val)``.

    Raises:
        ValueError: both of ``val_size`` and ``val_fraction``, values out of range, or a
            validation set that would leave no training problem.

    Examples:
        >>> from advbudget.lab.data import load_problems, sample_path, split_problems
        >>> problems = load_problems(sample_path())
        >>> train, val = split_problems(problems, val_size=8, max_samples=40, seed=1)
        >>> len(train), len(val)
        (32, 8)
        >>> train == split_problems(problems, val_size=8, max_samples=40, seed=1)[0]
        True
    """
    check_split_options(val_size=val_size, val_fraction=val_fraction, max_samples=max_samples)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed: expected an int, got {seed!r}")
    chosen = list(problems)
    if shuffle:
        random.Random(int(seed)).shuffle(chosen)
    if max_samples is not None:
        chosen = chosen[:max_samples]
    total = len(chosen)
    if val_size:
        held_out, option = val_size, f"val_size={val_size}"
    elif val_fraction:
        held_out = max(1, round(total * val_fraction))
        option = f"val_fraction={val_fraction} ({held_out} problems)"
    else:
        held_out, option = 0, ""
    if held_out and held_out >= total:
        raise ValueError(
            f"{option} leaves no training problem: it must be smaller than the {total} "
            "problems left after deduplication and max_samples"
        )
    return chosen[: total - held_out], chosen[total - held_out :]


def check_split_options(
    *,
    val_size: int | None = None,
    val_fraction: float | None = None,
    max_samples: int | None = None,
) -> None:
    """Check the options of :func:`split_problems` before any data is read.

    Examples:
        >>> from advbudget.lab.data import check_split_options
        >>> check_split_options(val_size=100, max_samples=1000)
        >>> check_split_options(val_size=10, val_fraction=0.1)
        Traceback (most recent call last):
        ...
        ValueError: val_size and val_fraction: give one of them, got val_size=10 and ...
    """
    if val_size is not None and val_fraction is not None:
        raise ValueError(
            "val_size and val_fraction: give one of them, got "
            f"val_size={val_size} and val_fraction={val_fraction}"
        )
    if val_size is not None:
        int_at_least("val_size", val_size, 0)
    if val_fraction is not None and (
        isinstance(val_fraction, bool)
        or not isinstance(val_fraction, numbers.Real)
        or not 0 <= val_fraction < 1
    ):
        raise ValueError(f"val_fraction: expected a number in [0, 1), got {val_fraction!r}")
    if max_samples is not None and (
        isinstance(max_samples, bool)
        or not isinstance(max_samples, numbers.Integral)
        or max_samples < 1
    ):
        raise ValueError(f"max_samples: expected an int >= 1, got {max_samples!r}")


def parse_formats(formats: str | Iterable[str]) -> tuple[str, ...]:
    """The output formats named by ``"all"``, ``"verl"``, ``"verl,trl"`` or a list.

    Examples:
        >>> from advbudget.lab.data import parse_formats
        >>> parse_formats("all")
        ('verl', 'trl', 'openrlhf', 'tunix', 'skyrl')
        >>> parse_formats("openrlhf, verl")
        ('openrlhf', 'verl')
        >>> parse_formats("rllib")
        Traceback (most recent call last):
        ...
        ValueError: formats: expected 'verl', 'trl', 'openrlhf', 'tunix', 'skyrl' or 'all' ...
    """
    names = formats.split(",") if isinstance(formats, str) else list(formats)
    chosen: list[str] = []
    for raw in names:
        name = raw.strip().lower() if isinstance(raw, str) else raw
        if name == "":
            continue  # "verl," is "verl"
        if name not in (*FORMATS, "all"):
            raise ValueError(
                f"formats: expected {', '.join(map(repr, FORMATS))} or 'all' "
                f"(comma-separated), got {raw!r}"
            )
        chosen += [f for f in (FORMATS if name == "all" else (name,)) if f not in chosen]
    if not chosen:
        raise ValueError(f"formats: expected at least one format name, got {formats!r}")
    return tuple(chosen)


def prepare(
    output_dir: str | os.PathLike[str],
    *,
    source: str | os.PathLike[str] = DEFAULT_SOURCE,
    formats: str | Iterable[str] = "all",
    split: str = "train",
    config: str | None = None,
    max_samples: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    val_size: int | None = None,
    val_fraction: float | None = None,
) -> PreparedData:
    """Load, deduplicate, shuffle, split and write DAPO-Math-17K for each trainer.

    Writes ``<output_dir>/verl/{train,val}.parquet``, ``<output_dir>/trl/{train,val}.parquet``
    ``<output_dir>/openrlhf/{train,val}.jsonl``, ``<output_dir>/tunix/{train,val}.jsonl`` and
    ``<output_dir>/skyrl/{train,val}.jsonl`` (no ``val`` file without a validation set); see
    :func:`write_verl`, :func:`write_trl`, :func:`write_openrlhf`, :func:`write_tunix` and
    :func:`write_skyrl`. Options are checked before anything is read.

    Args:
        output_dir: the folder to write into.
        source, split, config: as for :func:`load_problems`.
        formats: ``"all"``, one of ``"verl"``, ``"trl"``, ``"openrlhf"``, ``"tunix"``,
            ``"skyrl"``, or several
            (comma-separated or a list).
        max_samples, seed, shuffle, val_size, val_fraction: as for
            :func:`split_problems`.

    Returns:
        A :class:`PreparedData` with the dedup report, the splits and the files written.

    Examples:
        >>> import tempfile
        >>> from advbudget.lab.data import prepare, sample_path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     result = prepare(folder, source=sample_path(), val_size=4, seed=0)
        ...     names = {fmt: [p.name for p in paths] for fmt, paths in result.files.items()}
        >>> result.dedup.rows_after, len(result.train), len(result.val)
        (64, 60, 4)
        >>> names
        {'verl': ['train.parquet', 'val.parquet'], 'trl': ['train.parquet', 'val.parquet'],
         'openrlhf': ['train.jsonl', 'val.jsonl'], 'tunix': ['train.jsonl', 'val.jsonl'],
         'skyrl': ['train.jsonl', 'val.jsonl']}
    """
    chosen_formats = parse_formats(formats)
    check_split_options(val_size=val_size, val_fraction=val_fraction, max_samples=max_samples)
    unique, report = deduplicate(load_problems(source, split=split, config=config))
    train, val = split_problems(
        unique,
        val_size=val_size,
        val_fraction=val_fraction,
        max_samples=max_samples,
        seed=seed,
        shuffle=shuffle,
    )
    splits = {"train": train, "val": val}
    root = Path(output_dir)
    files = {name: WRITERS[name](splits, root / name) for name in chosen_formats}
    return PreparedData(source=os.fspath(source), dedup=report, train=train, val=val, files=files)
