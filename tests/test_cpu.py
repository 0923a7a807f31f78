"""hat.cpu: what a benchmark records about the CPU it ran on."""

from __future__ import annotations

from pathlib import Path

from hat.cpu import cpu_description, usable_cores


def test_cpu_description_names_the_model_and_the_matrix_extensions(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    flags = "fpu sse2 avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16"
    info.write_text(f"processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nmodel name\t: Test CPU 9000\nflags\t\t: {flags}\n")  # fmt: skip
    assert cpu_description(str(info)) == f"Test CPU 9000, {usable_cores()} cores, AVX-512 BF16, VNNI, AMX"


def test_cpu_description_without_bf16_or_a_readable_file(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Old CPU\nflags\t\t: fpu sse2 avx2\n")
    assert cpu_description(str(info)) == f"Old CPU, {usable_cores()} cores"
    assert cpu_description(str(tmp_path / "missing")) == f"unknown CPU, {usable_cores()} cores"
