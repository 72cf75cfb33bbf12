"""Reading back the build.ninja torch writes for the CUDA extension, on a CPU: a file shaped like torch's,
with this machine's paths in it, must come out as commands with placeholders and no absolute path."""

from __future__ import annotations

import os
import re
import sysconfig
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from kernels.cuda import EXTENSION_NAME, EXTRA_CUDA_CFLAGS, build_file

FAKE_CUDA = "/opt/fake-cuda-13.0"
ELSEWHERE = "/srv/toolchains/gcc-13/lib64"  # a path no placeholder covers


def write_build_file(build_dir: Path) -> Path:
    """A build.ninja laid out as torch.utils.cpp_extension writes it, for sources in this repository."""
    torch_dir = Path(torch.__file__).parent
    include = sysconfig.get_path("include")
    repo = build_file.REPO
    isystem = (
        f"-isystem {torch_dir}/include -isystem {torch_dir}/include/torch/csrc/api/include "
        f"-isystem {FAKE_CUDA}/include -isystem {include}"
    )
    defines = f"-DTORCH_EXTENSION_NAME={EXTENSION_NAME} -DTORCH_API_INCLUDE_EXTENSION_H"
    text = f"""ninja_required_version = 1.3
cxx = c++
nvcc = {FAKE_CUDA}/bin/nvcc

cflags = {defines} {isystem} -fPIC -std=c++17 -O3
post_cflags =
cuda_cflags = {defines} {isystem} -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ \
-D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr \
-gencode=arch=compute_90,code=compute_90 -gencode=arch=compute_90,code=sm_90 \
--compiler-options ''"'"'-fPIC'"'"'' -O3 -lineinfo -std=c++17
cuda_post_cflags =
cuda_dlink_post_cflags =
ldflags = -shared -L{torch_dir}/lib -lc10 -lc10_cuda -ltorch_cpu -ltorch_cuda -ltorch -L{FAKE_CUDA}/lib64 \
-lcudart -L{ELSEWHERE}

rule compile
  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags
  depfile = $out.d
  deps = gcc

rule cuda_compile
  depfile = $out.d
  deps = gcc
  command = $nvcc -MD -MF $out.d $cuda_cflags -c $in -o $out $cuda_post_cflags

rule link
  command = $cxx $in $ldflags -o $out

build pointwise.cuda.o: cuda_compile {repo}/kernels/cuda/pointwise.cu
build binding.o: compile {repo}/kernels/cuda/binding.cpp

build {EXTENSION_NAME}.so: link pointwise.cuda.o binding.o

default {EXTENSION_NAME}.so
"""
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / "build.ninja"
    path.write_text(text)
    return path


# An absolute path anywhere: at the start, after a space, `=` or a quote, or glued to -I/-L.
ABSOLUTE = re.compile(r"""(^|[\s='"]|-[IL])/\w""", re.MULTILINE)


@pytest.fixture
def ninja(tmp_path, monkeypatch):
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", FAKE_CUDA)
    return write_build_file(tmp_path / "extensions" / "py312_cu130" / EXTENSION_NAME)


def test_steps_are_the_three_commands_with_placeholders_and_no_machine_path(ninja, tmp_path):
    steps = build_file.steps(ninja)
    assert [s.rule for s in steps] == ["cuda_compile", "compile", "link"]
    nvcc, cxx, link = (s.command for s in steps)
    assert steps[0].build == "build pointwise.cuda.o: cuda_compile <repo>/kernels/cuda/pointwise.cu"
    assert nvcc.startswith("<cuda>/bin/nvcc -MD -MF pointwise.cuda.o.d ")
    assert nvcc.endswith("-c <repo>/kernels/cuda/pointwise.cu -o pointwise.cuda.o")
    assert "-isystem <torch>/include " in nvcc and "-isystem <python-include>" in nvcc
    assert "-isystem <cuda>/include" in nvcc
    assert cxx.startswith("c++ -MMD -MF binding.o.d ") and "-O3" in cxx and "-lineinfo" not in cxx
    assert link.startswith("c++ pointwise.cuda.o binding.o -shared -L<torch>/lib")
    assert f"-L<other>/lib64 -o {EXTENSION_NAME}.so" in link  # the path no placeholder covers
    for text in [s.build for s in steps] + [nvcc, cxx, link, build_file.rules(ninja)]:
        assert not ABSOLUTE.search(text), text
        assert str(tmp_path) not in text
    assert "$" not in nvcc + cxx + link  # every ninja variable was filled in


def test_the_flags_a_reader_is_told_about_are_kept(ninja):
    nvcc = build_file.steps(ninja)[0].command
    groups = build_file.flag_groups(nvcc, EXTRA_CUDA_CFLAGS)
    assert groups["ours"] == ["-O3", "-lineinfo"]
    assert groups["arch"] == [
        "-gencode=arch=compute_90,code=compute_90",
        "-gencode=arch=compute_90,code=sm_90",
    ]
    assert "-D__CUDA_NO_HALF_OPERATORS__" in groups["defines"]
    assert "--expt-relaxed-constexpr" in groups["other"] and "-std=c++17" in groups["other"]
    assert not any(word.startswith(("<", "/")) for group in groups.values() for word in group)


def test_rules_are_the_file_as_written_with_paths_redacted(ninja):
    text = build_file.rules(ninja)
    assert "rule cuda_compile" in text and "$nvcc -MD -MF $out.d $cuda_cflags -c $in -o $out" in text
    assert "nvcc = <cuda>/bin/nvcc" in text and "-O3 -lineinfo" in text
    assert not ABSOLUTE.search(text)


def test_redact_replaces_whole_path_components_only():
    places = {"/opt/cuda": "<cuda>", "/opt/cuda/targets": "<targets>"}
    text = "/opt/cuda/bin/nvcc -I/opt/cuda/targets/include -L/opt/cuda-12/lib =/opt/cuda"
    assert build_file.redact(text, places) == "<cuda>/bin/nvcc -I<targets>/include -L<other>/lib =<cuda>"
    assert (
        build_file.redact("-Wl,-rpath,/opt/cuda/lib64:/srv/lib", places)
        == "-Wl,-rpath,<cuda>/lib64:<other>/lib"
    )


def test_flag_groups_reads_the_older_dependency_flags_too():
    nvcc = (
        "<cuda>/bin/nvcc --generate-dependencies-with-compile --dependency-output x.o.d -DA=1 -O3 -lineinfo "
        "-gencode arch=compute_80,code=sm_80 -c <repo>/x.cu -o x.o"
    )
    groups = build_file.flag_groups(nvcc, ["-O3", "-lineinfo"])
    assert groups == {
        "ours": ["-O3", "-lineinfo"],
        "arch": ["-gencode arch=compute_80,code=sm_80"],
        "defines": ["-DA=1"],
        "other": [],
    }


def test_find_takes_the_newest_build_file_and_honours_torch_extensions_dir(tmp_path, monkeypatch):
    old = write_build_file(tmp_path / "py311_cu121" / EXTENSION_NAME)
    new = write_build_file(tmp_path / "py312_cu130" / EXTENSION_NAME)
    write_build_file(tmp_path / "py312_cu130" / "another_extension")
    os.utime(old, (1e9, 1e9))
    os.utime(new, (2e9, 2e9))
    assert build_file.find(root=tmp_path) == new
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert build_file.find() == new
    with pytest.raises(FileNotFoundError, match="call kernels.cuda.load"):
        build_file.find(root=tmp_path / "empty")


def test_wrap_breaks_between_flags_only_and_keeps_each_flag_with_its_argument(ninja):
    nvcc = build_file.steps(ninja)[0].command
    lines = build_file.wrap(nvcc, width=60).splitlines()
    assert len(lines) > 3 and " ".join(line.strip() for line in lines) == nvcc
    assert all(line.strip().split()[0].startswith(("<cuda>", "-")) for line in lines)
    assert all(line.split()[-1] not in ("-isystem", "-o", "-c", "-MF") for line in lines)
    assert any(line.strip().startswith("-isystem <torch>/include") for line in lines)
