"""Every CLI command fails cleanly: one line on stderr, an exit code, no partial output.

For each command: a bad path, a read-only destination, a full disk (a write raising
ENOSPC) and Ctrl-C (KeyboardInterrupt mid-run; once a real SIGINT to a subprocess).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from advbudget.lab.cli import app

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_error_line(result, code: int, *fragments: str) -> str:
    """The exit code is ``code`` and stderr is one ``error:`` line holding ``fragments``."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def read_only(tmp_path) -> Path:
    """A folder nothing can be written under. chmod 0o500 does not stop root, so as root
    this is a path under /sys (sysfs refuses new entries); skipped if neither works."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
        return
    folder = Path("/sys/advbudget-test-read-only")
    try:
        folder.mkdir()
    except OSError:
        yield folder
        return
    folder.rmdir()
    pytest.skip("running as root, and /sys takes new folders: no read-only place to test")


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return path


# data prepare -------------------------------------------------------------------------


def test_data_prepare_output_dir_is_a_file(a_file):
    result = invoke("data", "prepare", "--sample", "-o", str(a_file))
    one_error_line(result, 1, "--output-dir", str(a_file), "not a folder")
    assert a_file.read_text() == "not a folder\n"


def test_data_prepare_output_dir_under_a_file(a_file):
    result = invoke("data", "prepare", "--sample", "-o", str(a_file / "out"))
    one_error_line(result, 1, "--output-dir", str(a_file), "is a file")


def test_data_prepare_missing_and_folder_sources(tmp_path):
    missing = tmp_path / "missing.jsonl"
    result = invoke("data", "prepare", "--source", str(missing), "-o", str(tmp_path / "out"))
    one_error_line(result, 1, str(missing), "no such file")
    folder = tmp_path / "folder"
    folder.mkdir()
    result = invoke("data", "prepare", "--source", str(folder), "-o", str(tmp_path / "out"))
    one_error_line(result, 1, str(folder))
    assert tree(tmp_path) == ["folder"]


def test_data_prepare_read_only(read_only):
    result = invoke("data", "prepare", "--sample", "-o", str(read_only / "out"))
    one_error_line(result, 1, "--output-dir", str(read_only / "out"), "cannot write")


def test_data_prepare_full_disk_leaves_nothing(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    def full(table, where, **options):
        Path(where).write_bytes(b"PAR1 half a file")
        raise ENOSPC

    monkeypatch.setattr(pq, "write_table", full)
    result = invoke("data", "prepare", "--sample", "-o", str(tmp_path / "new" / "out"))
    one_error_line(result, 1, "No space left on device")
    assert tree(tmp_path) == []


@pytest.mark.parametrize("existing", [False, True])
def test_data_prepare_ctrl_c_leaves_nothing(tmp_path, monkeypatch, existing):
    from advbudget.adapters._files import adapter_module

    out = tmp_path / "out"
    if existing:  # an earlier run's files are kept as they were
        (out / "verl").mkdir(parents=True)
        (out / "verl" / "train.parquet").write_text("earlier")

    def interrupted(splits, folder):
        raise KeyboardInterrupt

    # verl and trl are written first; openrlhf is interrupted.
    monkeypatch.setattr(adapter_module("openrlhf", "data"), "write_openrlhf", interrupted)
    result = invoke("data", "prepare", "--sample", "-o", str(out))
    one_error_line(result, 130, "interrupted")
    if existing:
        assert tree(tmp_path) == ["out", "out/verl", "out/verl/train.parquet"]
        assert (out / "verl" / "train.parquet").read_text() == "earlier"
    else:
        assert tree(tmp_path) == []


def test_data_prepare_still_writes_into_an_existing_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = invoke("data", "prepare", "--sample", "-o", str(tmp_path), "--format", "trl")
    assert result.exit_code == 0, result.output
    assert tree(tmp_path) == ["keep.txt", "trl", "trl/train.parquet"]


# eval ---------------------------------------------------------------------------------


class Scripted:
    """Answers correctly in the first ``index % (n + 1)`` samples; two prompts a call;
    ``fail_on`` the chunk at which to raise (KeyboardInterrupt, OSError, ...)."""

    chunk_size = 2

    def __init__(self, fail_on: int | None = None, error: BaseException | None = None):
        self.calls, self.fail_on, self.error = 0, fail_on, error

    def generate(self, messages, *, n, temperature, max_new_tokens, seed=None):
        if self.calls == self.fail_on:
            assert self.error is not None
            raise self.error
        self.calls += 1
        outputs = []
        for chat in messages:
            answer = chat[-1]["content"].split("ANSWER=")[1].split()[0]
            right = int(answer) % (n + 1)
            outputs.append([f"Answer: {answer}"] * right + ["Answer: nope"] * (n - right))
        return outputs


@pytest.fixture
def bench(tmp_path) -> Path:
    path = tmp_path / "bench.jsonl"
    rows = [{"problem": f"Say ANSWER={i} please", "answer": str(i)} for i in range(7)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def use(monkeypatch, generator: Scripted) -> None:
    monkeypatch.setattr("advbudget.lab.eval._run.make_generator", lambda *a, **k: generator)


def run_eval(bench: Path, out: Path, *extra: str):
    return invoke("eval", "--model", "m", "--benchmarks", str(bench), "--n", "3", "--k", "1",
                  "--k", "3", "--grader", "dapo", "--output-dir", str(out), *extra)  # fmt: skip


def test_eval_output_dir_is_a_file(bench, a_file, monkeypatch):
    use(monkeypatch, Scripted())
    one_error_line(run_eval(bench, a_file), 1, "--output-dir", str(a_file), "not a folder")


def test_eval_missing_benchmark_file(tmp_path):
    missing = tmp_path / "missing.jsonl"
    result = run_eval(missing, tmp_path / "out")
    one_error_line(result, 2, str(missing), "no such file")
    assert tree(tmp_path) == []


def test_eval_read_only(bench, read_only, monkeypatch):
    use(monkeypatch, Scripted())
    one_error_line(run_eval(bench, read_only / "out"), 1, "--output-dir", "cannot write")


def test_eval_full_disk_before_anything_is_saved_leaves_nothing(bench, tmp_path, monkeypatch):
    use(monkeypatch, Scripted())

    def full(fd):
        raise ENOSPC

    monkeypatch.setattr(os, "fsync", full)
    result = run_eval(bench, tmp_path / "out")
    one_error_line(result, 1, str(tmp_path / "out"), "No space left", "nothing was written")
    assert tree(tmp_path) == ["bench.jsonl"]


def test_eval_full_disk_midway_keeps_what_is_saved_for_resume(bench, tmp_path, monkeypatch):
    use(monkeypatch, Scripted(fail_on=2, error=ENOSPC))
    out = tmp_path / "out"
    result = run_eval(bench, out)
    one_error_line(result, 1, "No space left", "4 problems are saved", "--resume")
    assert not (out / "scores.json").exists()
    assert len((out / "generations.jsonl").read_text().splitlines()) == 4
    use(monkeypatch, Scripted())
    resumed = run_eval(bench, out, "--resume")
    assert resumed.exit_code == 0, resumed.output
    fresh = run_eval(bench, tmp_path / "fresh")
    assert fresh.exit_code == 0, fresh.output
    assert (out / "scores.json").read_text() == (tmp_path / "fresh" / "scores.json").read_text()


def test_eval_ctrl_c(bench, tmp_path, monkeypatch):
    use(monkeypatch, Scripted(fail_on=0, error=KeyboardInterrupt()))
    result = run_eval(bench, tmp_path / "out")
    one_error_line(result, 130, "interrupted", "nothing was written")
    assert tree(tmp_path) == ["bench.jsonl"]
    use(monkeypatch, Scripted(fail_on=1, error=KeyboardInterrupt()))
    result = run_eval(bench, tmp_path / "out")
    one_error_line(result, 130, "interrupted", "2 problems are saved", "--resume")
    assert not (tmp_path / "out" / "scores.json").exists()


def test_eval_refuses_an_earlier_run_without_resume(bench, tmp_path, monkeypatch):
    use(monkeypatch, Scripted())
    assert run_eval(bench, tmp_path / "out").exit_code == 0
    before = (tmp_path / "out" / "generations.jsonl").read_bytes()
    result = run_eval(bench, tmp_path / "out")
    one_error_line(result, 2, "already holds 7 problems", "--resume", "--output-dir")
    assert (tmp_path / "out" / "generations.jsonl").read_bytes() == before


def test_eval_score_only_bad_paths(tmp_path, a_file):
    missing = tmp_path / "missing.jsonl"
    out = tmp_path / "re"
    one_error_line(invoke("eval", "--score-only", str(missing), "--output-dir", str(out)), 1,
                   "--score-only", str(missing), "no such file")  # fmt: skip
    one_error_line(invoke("eval", "--score-only", str(tmp_path), "--output-dir", str(out)), 1,
                   "--score-only", "is a folder")  # fmt: skip
    generations = tmp_path / "g.jsonl"
    generations.write_text('{"benchmark": "b", "answer": "1", "samples": ["Answer: 1"]}\n')
    one_error_line(invoke("eval", "--score-only", str(generations), "--output-dir", str(a_file)),
                   1, "--output-dir", "not a folder")  # fmt: skip
    assert tree(tmp_path) == ["a-file", "g.jsonl"]


@pytest.mark.parametrize("error", [ENOSPC, KeyboardInterrupt()])
def test_eval_score_only_full_disk_and_ctrl_c_leave_nothing(tmp_path, monkeypatch, error):
    generations = tmp_path / "g.jsonl"
    generations.write_text('{"benchmark": "b", "answer": "1", "samples": ["Answer: 1"]}\n')

    def fail(fd):
        raise error

    monkeypatch.setattr(os, "fsync", fail)
    result = invoke("eval", "--score-only", str(generations), "--grader", "dapo",
                    "--output-dir", str(tmp_path / "new" / "re"))  # fmt: skip
    if isinstance(error, KeyboardInterrupt):
        one_error_line(result, 130, "interrupted")
    else:
        one_error_line(result, 1, "No space left on device")
    assert tree(tmp_path) == ["g.jsonl"]


# simulate -----------------------------------------------------------------------------

SIMULATE = ("simulate", "--quick", "--estimators", "dr", "--steps", "3")


def test_simulate_output_dir_is_a_file(a_file):
    result = invoke(*SIMULATE, "--output-dir", str(a_file))
    one_error_line(result, 1, "--output-dir", str(a_file), "not a folder")


def test_simulate_read_only_is_found_before_training(read_only, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("trained before checking --output-dir")

    monkeypatch.setattr("advbudget.lab.cli._simulate.run_experiment", never)
    result = invoke(*SIMULATE, "--output-dir", str(read_only / "out"))
    one_error_line(result, 1, "--output-dir", "cannot write")


def test_simulate_full_disk_leaves_nothing(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def full(self, where, **options):
        Path(where).write_bytes(b"\x89PNG half")
        raise ENOSPC

    monkeypatch.setattr(Figure, "savefig", full)
    result = invoke(*SIMULATE, "--output-dir", str(tmp_path / "new" / "demo"))
    one_error_line(result, 1, "No space left on device")
    assert tree(tmp_path) == []  # not even compare.json, written before the plot


def test_simulate_ctrl_c_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("advbudget.lab.cli._simulate.run_experiment", interrupted)
    result = invoke(*SIMULATE, "--output-dir", str(tmp_path / "demo"))
    one_error_line(result, 130, "interrupted")
    assert tree(tmp_path) == []


def test_simulate_sigint_to_a_real_process(tmp_path):
    """Ctrl-C as a shell sends it: SIGINT to a running `advbudget simulate`."""
    out = tmp_path / "demo"
    # A terminal's foreground Python gets KeyboardInterrupt on SIGINT, whatever this test
    # process (a pytest-xdist worker) passes on: a child inherits SIG_IGN, and Python then
    # installs no handler. The child sets it itself (a preexec_fn would run the fork hooks
    # of whatever this process imported, such as JAX's, which warn).
    program = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from advbudget.lab.cli import main; main()"
    )
    command = [sys.executable, "-c", program,
               "simulate", "--quick", "--steps", "200000", "--output-dir", str(out)]  # fmt: skip
    inherited = signal.getsignal(signal.SIGINT)
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        # The temporary folder beside --output-dir appears as training starts.
        while not list(tmp_path.glob(".demo.partial-*")):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.05)
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after SIGINT (SIGINT here: {inherited!r})")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()  # reaps it and closes its pipes
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == ["error: interrupted (Ctrl-C); nothing was written"]
    assert tree(tmp_path) == []


# explain --plot -----------------------------------------------------------------------


def test_explain_plot_bad_paths(tmp_path, a_file):
    one_error_line(invoke("explain", "--plot", str(a_file / "x.png")), 1, "--plot", "is a file")
    one_error_line(invoke("explain", "--plot", str(tmp_path)), 1, "--plot", "is a folder")
    assert tree(tmp_path) == ["a-file"]


def test_explain_plot_read_only(read_only):
    result = invoke("explain", "--plot", str(read_only / "slopes.png"))
    one_error_line(result, 1, "--plot", "cannot write")


@pytest.mark.parametrize("error", [ENOSPC, KeyboardInterrupt()])
def test_explain_plot_full_disk_and_ctrl_c_leave_nothing(tmp_path, monkeypatch, error):
    from matplotlib.figure import Figure

    def fail(self, where, **options):
        Path(where).write_bytes(b"\x89PNG half")
        raise error

    monkeypatch.setattr(Figure, "savefig", fail)
    result = invoke("explain", "--plot", str(tmp_path / "figs" / "slopes.png"))
    if isinstance(error, KeyboardInterrupt):
        one_error_line(result, 130, "interrupted")
    else:
        one_error_line(result, 1, "slopes.png", "No space left on device")
    assert tree(tmp_path) == []


def test_explain_plot_writes_the_figure(tmp_path):
    result = invoke("explain", "--plot", str(tmp_path / "figs" / "slopes.svg"))
    assert result.exit_code == 0, result.output
    assert tree(tmp_path) == ["figs", "figs/slopes.svg"]
    assert (tmp_path / "figs" / "slopes.svg").read_text().lstrip().startswith("<?xml")


# estimators ---------------------------------------------------------------------------


def test_estimators_ctrl_c(monkeypatch):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr("advbudget.lab.cli._estimators_page.estimators_markdown", interrupted)
    one_error_line(invoke("estimators", "--markdown"), 130, "interrupted")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [[], ["--markdown"]])
def test_estimators_to_a_full_disk(args):
    command = [sys.executable, "-c", "from advbudget.lab.cli import main; main()", "estimators"]
    with open("/dev/full", "w") as full:
        process = subprocess.run(
            command + args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert process.returncode == 1, process.stderr
    assert process.stderr.strip().splitlines() == [
        "error: standard output: No space left on device"
    ]


# tables fit an 80-column terminal ---------------------------------------------------------


def narrow(*args: str):
    """The command's output in an 80-column terminal (rich reads COLUMNS)."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def assert_fits(output: str, *intact: str, exempt: tuple[str, ...] = ()) -> None:
    """Every line is at most 80 characters (bar ``exempt`` prefixes: commands printed to be
    copied whole, which the terminal soft-wraps), and each of ``intact`` appears in one
    line, unbroken (a cell squeezed until its text wraps breaks it)."""
    lines = output.splitlines()
    long = [line for line in lines if len(line) > 80 and not line.startswith(exempt)]
    assert not long, long
    for text in intact:
        assert any(text in line for line in lines), (text, output)


def test_explain_tables_fit_80_columns():
    from advbudget import theory

    output = narrow("explain")  # make demo's first output
    cells = []
    for name in ("budget", "grpo", "dr", "rloo"):
        correct, wrong = theory.binary_advantages(name, 8)
        cells += [f"{correct[k]:+.4f} {wrong[k]:+.4f}" for k in range(1, 8)]
    assert_fits(output, *cells, "budget", "rloo", "f'_7(p)")
    assert output.count("Advantages of a correct") == 1  # the four estimators in one table
    # Many estimators: split into more tables, each still fitting, no number broken.
    names = ["budget", "grpo", "dr", "rloo", "gpg", "grpo_passk", "rloo_normalized"]
    output = narrow("explain", "--estimators", ",".join(names), "-G", "16")
    slopes = theory.implied_slope("rloo_normalized", 16, np.array([0.01, 0.99]))
    assert_fits(output, *names, *[f"{s:.4f}" for s in slopes], "+0.9375 -0.0625")
    assert output.count("Advantages of a correct") == 2


def test_data_prepare_tables_fit_80_columns(tmp_path):
    from advbudget.lab.data._samples import sample_path

    out = tmp_path / "prepared"
    output = narrow("data", "prepare", "--sample", "-o", str(out), "--val-size", "8")
    # Paths are whole lines, not folded cells: those lines and the trainers' command lines
    # are printed whole (one line each, to copy) and may pass 80 columns, no other line.
    assert_fits(
        output,
        f"Prepared data from {sample_path('dapo')}",
        f"Files written in {out}",
        "openrlhf/train.jsonl",
        "dropped repeats with a different answer",
        exempt=(
            "verl: ",
            "trl: ",
            "openrlhf: ",
            "tunix: ",
            "skyrl: ",
            "Prepared data from ",
            "Files written in ",
        ),
    )
    commands = [line for line in output.splitlines() if line.startswith(("verl:", "openrlhf:"))]
    assert len(commands) == 2
    assert all(str(out) in line for line in commands)


def test_eval_table_fits_80_columns(tmp_path):
    generations = tmp_path / "generations.jsonl"
    samples = ["Answer: 4"] * 3 + ["Answer: 5"] * 5
    rows = [{"benchmark": b, "answer": "4", "samples": samples} for b in ("aime24", "math500")]
    generations.write_text("".join(json.dumps(row) + "\n" for row in rows))
    ks = [arg for k in range(1, 9) for arg in ("--k", str(k))]
    output = narrow("eval", "--score-only", str(generations), "--grader", "dapo",
                    "--output-dir", str(tmp_path / "out"), *ks)  # fmt: skip
    assert_fits(output, *[f"pass@{k}" for k in range(1, 9)], "37.50", "100.00", "average")


# one line, not a traceback, for what a user can fix ------------------------------------------


def test_explain_bad_plot_suffix_is_refused_before_any_work(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("computed the tables before checking --plot")

    monkeypatch.setattr("advbudget.theory.binary_advantages", never)
    result = invoke("explain", "--plot", str(tmp_path / "slopes.pngg"))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)
    # rich wraps the message in a box, anywhere in a long path: compare without spaces.
    text = "".join(result.output.replace("│", " ").split())
    for fragment in ("Invalid value for --plot", "slopes.pngg", "'png'", "'svg'"):
        assert fragment.replace(" ", "") in text, (fragment, text)
    assert tree(tmp_path) == []


def test_a_missing_grader_is_found_before_the_model_is_loaded(tmp_path, monkeypatch, bench):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # as if not installed

    def never(*args, **kwargs):
        raise AssertionError("loaded the model before finding the grader missing")

    monkeypatch.setattr("advbudget.lab.eval._run.make_generator", never)
    result = invoke("eval", "--model", "m", "--benchmarks", str(bench),
                    "--output-dir", str(tmp_path / "out"))  # fmt: skip
    one_error_line(result, 1, "--grader math_verify needs math-verify, which is not installed",
                   'pip install -e ".[rewards]"', "--grader dapo")  # fmt: skip
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("module", "args", "code", "expected"),
    [
        ("transformers", ("--backend", "transformers"), 2, "needs transformers"),
        ("datasets", ("data",), 1, "advbudget data prepare needs datasets"),
        ("matplotlib", ("explain",), 1, "--plot needs matplotlib"),
    ],
)
def test_missing_optional_dependencies_name_the_extra(
    tmp_path, monkeypatch, bench, module, args, code, expected
):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    if module == "matplotlib":
        monkeypatch.setitem(sys.modules, "matplotlib.backend_bases", None)
        result = invoke("explain", "--plot", str(tmp_path / "slopes.png"))
    elif module == "datasets":  # the hub source needs datasets
        result = invoke("data", "prepare", "-o", str(tmp_path / "data"))
    else:
        result = invoke("eval", "--model", "m", "--benchmarks", str(bench), *args,
                        "--grader", "dapo", "--output-dir", str(tmp_path / "out"))  # fmt: skip
    extra = {"transformers": "eval", "datasets": "data", "matplotlib": "plot"}[module]
    one_error_line(result, code, expected, f'pip install -e ".[{extra}]"')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.jsonl"]


def offline(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """A command run with HF_HUB_OFFLINE=1 and an empty Hugging Face cache (a fresh
    process: huggingface_hub reads HF_HUB_OFFLINE when it is imported)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(home), "COLUMNS": "80"}
    command = [sys.executable, "-c", "from advbudget.lab.cli import main; main()", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def assert_one_line(process: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert process.returncode == 1, (process.stdout, process.stderr)
    assert "Traceback" not in process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1, process.stderr
    assert lines[0].startswith("error: "), process.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_an_unreachable_hub_says_what_is_not_cached_and_how_to_fix(tmp_path, bench):
    home = tmp_path / "hf"
    fix = ("is not in the local Hugging Face cache", "HF_HUB_OFFLINE is set")
    data = offline("data", "prepare", "-o", str(tmp_path / "data"), home=home)
    assert_one_line(data, "dataset BytedTsinghua-SIA/DAPO-Math-17k", *fix, "--source")
    benchmark = offline("eval", "--model", "m", "--benchmarks", "amc23", "--grader", "dapo",
                        "--output-dir", str(tmp_path / "e1"), home=home)  # fmt: skip
    assert_one_line(benchmark, "dataset math-ai/amc23", *fix, "local .jsonl")
    model = offline("eval", "--model", "Qwen/Qwen3-0.6B", "--benchmarks", str(bench),
                    "--backend", "transformers", "--grader", "dapo",
                    "--output-dir", str(tmp_path / "e2"), home=home)  # fmt: skip
    assert_one_line(model, "model Qwen/Qwen3-0.6B", *fix, "hf download Qwen/Qwen3-0.6B")
    assert not any((tmp_path / name).exists() for name in ("data", "e1", "e2"))


def test_eval_score_only_keeps_the_runs_pass_at_k(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    samples = ["Answer: 4"] * 2 + ["Answer: 5"] * 6  # 2 of 8 correct
    (run / "generations.jsonl").write_text(
        json.dumps({"benchmark": "b", "answer": "4", "samples": samples}) + "\n"
    )
    folders = iter(range(100))

    def rescored(*extra: str) -> dict:
        out = tmp_path / f"out{next(folders)}"
        result = invoke("eval", "--score-only", str(run / "generations.jsonl"), "--grader",
                        "dapo", "--output-dir", str(out), *extra)  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "pass@" in result.stdout
        return json.loads((out / "scores.json").read_text())["benchmarks"]["b"]["pass_at"]

    # Without settings.json beside it: pass@n, what a sampling run reports by default.
    assert rescored() == {"8": 1.0}
    # With the run's settings.json: its pass@k (1 - C(6,k)/C(8,k)); --k still chooses.
    (run / "settings.json").write_text(json.dumps({"ks": [1, 4], "n": 8}))
    assert rescored() == {"1": pytest.approx(0.25), "4": pytest.approx(1 - 15 / 70)}
    assert rescored("--k", "2") == {"2": pytest.approx(1 - 15 / 28)}
