"""advbudget.testing._required: where ADVBUDGET_REQUIRE names a package, a skip for want
of it fails (module-level and in-test importorskip alike); other skips stay skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MODULE_SKIP = 'import pytest\npytest.importorskip("advbudget_no_such_package")\n\n\n'
MODULE_SKIP += "def test_never_runs():\n    pass\n"
TEST_SKIPS = """import pytest


def test_in_test_import():
    pytest.importorskip("advbudget_no_such_package.sub")


def test_no_gpu():
    pytest.skip("needs a GPU")
"""


def _run(tmp_path: Path, require: str | None, *files: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    (tmp_path / "test_skips.py").write_text(TEST_SKIPS)
    env = {k: v for k, v in os.environ.items() if k != "ADVBUDGET_REQUIRE"}
    if require is not None:
        env["ADVBUDGET_REQUIRE"] = require
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "advbudget.testing._required"]
    command += ["-p", "no:cacheprovider", "--rootdir", str(tmp_path), *files]
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_without_the_variable_skips_stay_skips(tmp_path: Path) -> None:
    out = _run(tmp_path, None, "test_module_skip.py", "test_skips.py")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 skipped" in out.stdout


def test_a_required_package_that_does_not_import_fails(tmp_path: Path) -> None:
    require = "numpy, advbudget_no_such_package"
    module = _run(tmp_path, require, "test_module_skip.py")  # at collection: an error
    assert module.returncode == 2, module.stdout + module.stderr
    assert "advbudget_no_such_package could not be imported" in module.stdout
    assert "1 error" in module.stdout
    tests = _run(tmp_path, require, "test_skips.py")
    assert tests.returncode == 1, tests.stdout + tests.stderr
    assert "advbudget_no_such_package.sub could not be imported" in tests.stdout
    assert "1 failed, 1 skipped" in tests.stdout  # the GPU skip stays one
    assert "needs a GPU" in tests.stdout
