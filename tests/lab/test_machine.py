"""The machine probe every experiment and benchmark record carries."""

from __future__ import annotations

from pathlib import Path

from advbudget.lab._machine import cpu_flags, machine_info


def test_cpu_flags_reads_the_model_and_vector_flags(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Example CPU @ 2GHz\nflags\t\t: fpu sse4_2 avx avx2 fma\n"
        "\nprocessor\t: 1\nmodel name\t: Example CPU @ 2GHz\nflags\t\t: fpu sse4_2 avx avx2 fma\n"
    )
    assert cpu_flags(cpuinfo) == {
        "model": "Example CPU @ 2GHz",
        "vector_flags": ["sse4_2", "avx", "avx2", "fma"],
    }
    assert cpu_flags(tmp_path / "missing")["vector_flags"] is None


def test_machine_info_versions_without_importing() -> None:
    import sys

    info = machine_info(packages=("numpy", "no-such-package-xyz"))
    assert info["packages"]["numpy"] == __import__("numpy").__version__
    assert info["packages"]["no-such-package-xyz"] is None
    assert info["cpu_count"] >= 1
    assert "no-such-package-xyz" not in sys.modules
