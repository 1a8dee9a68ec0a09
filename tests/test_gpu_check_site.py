"""bench/gpu/check_site.py: a staged site folder's requirements, read from real dist-info
metadata written here, as pip writes it."""

from __future__ import annotations

from pathlib import Path

from bench.gpu.check_site import main, problems


def _dist(site: Path, name: str, version: str, *requires: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_a_wrong_version_is_an_error_and_an_absent_one_a_warning(tmp_path: Path) -> None:
    # the device's first vLLM start: xgrammar 0.2.9 beside apache-tvm-ffi 0.1.10
    _dist(tmp_path, "vllm", "0.26.0", "xgrammar==0.2.9", "flashinfer-python==0.6.14", "torch")
    _dist(tmp_path, "xgrammar", "0.2.9", "apache-tvm-ffi>=0.1.11", 'pywin32; sys_platform=="win32"')
    _dist(tmp_path, "apache-tvm-ffi", "0.1.10")
    _dist(tmp_path, "unrelated", "1.0", "apache-tvm-ffi>=9")  # not needed by vllm
    errors, absent = problems(tmp_path, "vllm")
    assert errors == ["xgrammar needs apache-tvm-ffi>=0.1.11: apache-tvm-ffi 0.1.10 is there"]
    assert absent == ["vllm needs flashinfer-python==0.6.14"]  # torch: the image's; win32: no
    assert main([str(tmp_path), "--root", "vllm"]) == 1
    assert len(problems(tmp_path)[0]) == 2  # without --root the unrelated package counts too


def test_a_consistent_folder_passes(tmp_path: Path) -> None:
    _dist(tmp_path, "xgrammar", "0.2.9", "apache-tvm-ffi>=0.1.11")
    _dist(tmp_path, "apache-tvm-ffi", "0.1.11")
    assert problems(tmp_path, "xgrammar") == ([], [])
    assert main([str(tmp_path)]) == 0
