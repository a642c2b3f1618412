"""Spares that set up CUDA ahead of their tests, on a real GPU: later tests find CUDA initialised
in their process (never in the zygote), run CUDA graphs, and no process outlives the session."""

from __future__ import annotations

import pytest

from ..helpers import all_gone

TESTS = """
import os
import pytest
import torch

pytestmark = pytest.mark.cudagraph_subprocess(require_cuda=True)

def note(found):
    with open(os.environ["RAN"], "a") as log:
        log.write(f"{os.getpid()} {os.getppid()} {found}\\n")

def replay():
    static_in = torch.zeros(64, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        static_in @ static_in
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in @ static_in + 1
    x = torch.randn(64, 64, device="cuda")
    static_in.copy_(x)
    graph.replay()
    torch.testing.assert_close(static_out, x @ x + 1, atol=1e-2, rtol=1e-2)

@pytest.mark.parametrize("n", range(8))
def test_graph(n):
    note(torch.cuda.is_initialized())
    replay()
"""


@pytest.mark.parametrize("ahead", ["true", "false"])
def test_later_test_processes_find_cuda_set_up_ahead(
    gpu_tester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    ahead: str,
) -> None:
    ran = gpu_tester.path / "ran.log"
    monkeypatch.setenv("RAN", str(ran))
    gpu_tester.makeini(
        f"[pytest]\ncudagraph_spares = 2\ncudagraph_cuda_ahead = {ahead}\n"
        "filterwarnings = ignore:Failed to initialize NumPy:UserWarning\n"
    )
    gpu_tester.makepyfile(TESTS)
    result = gpu_tester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    assert "fresh interpreter" not in result.stdout.str()
    lines = [line.split() for line in ran.read_text().splitlines()]
    found = [initialised == "True" for _, _, initialised in lines]
    assert not found[0]
    assert any(found) == (ahead == "true")
    pids = [int(pid) for pid, _, _ in lines] + [int(lines[0][1])]  # the tests' and the zygote
    assert all_gone(pids)


WARM_UP_TESTS = """
import json
import os
import time
import pytest
import torch
from pytest_cudagraph_guard.isolation import cuda

pytestmark = pytest.mark.cudagraph_subprocess(require_cuda=True)
STEPS = ["elementwise and reductions", "float32 matmul", "float16 matmul", "bfloat16 matmul"]

def looks():  # the default seed is random per process: not compared
    generator = torch.cuda.default_generators[0]
    return {
        "stats": torch.cuda.memory_stats(),
        "allocated": torch.cuda.memory_allocated(),
        "reserved": torch.cuda.memory_reserved(),
        "offset": generator.get_offset(),
    }

def test_1_a_fresh_process_as_it_looks():
    torch.cuda.init()
    with open(os.environ["FRESH"], "w") as out:
        json.dump(looks(), out)

@pytest.mark.parametrize("n", [2, 3])
def test_gives_the_spares_time(n):
    time.sleep(2)

@pytest.mark.parametrize("n", [4, 5, 6])
def test_finds_kernels_warmed_up_and_its_process_as_fresh(n):
    assert torch.cuda.is_initialized()
    assert cuda.AHEAD.warmed_up == STEPS[: len(cuda.AHEAD.warmed_up)]
    if n == 4:  # its spare had the two tests before to warm up
        assert cuda.AHEAD.warmed_up == STEPS
    assert looks() == json.load(open(os.environ["FRESH"]))
    x = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    torch.testing.assert_close((x @ x).float(), x.float() @ x.float(), atol=0.5, rtol=1e-2)

def test_7_gives_the_spares_time():
    time.sleep(2)

def test_8_sets_a_cublas_variable_in_its_body(monkeypatch):
    assert "float32 matmul" in cuda.AHEAD.warmed_up
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    x = torch.ones(8, 8, device="cuda")
    assert (x @ x).sum().item() == 512
"""


def test_spares_warm_kernels_up_and_their_tests_find_the_process_as_a_fresh_one(
    gpu_tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FRESH", str(gpu_tester.path / "fresh.json"))
    gpu_tester.makeini(
        "[pytest]\ncudagraph_spares = 2\n"
        "filterwarnings = ignore:Failed to initialize NumPy:UserWarning\n"
    )
    gpu_tester.makepyfile(WARM_UP_TESTS)
    result = gpu_tester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    assert "warm-up failed" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: *::test_8_sets_a_cublas_variable_in_its_body set "
            "CUBLAS_WORKSPACE_CONFIG, which its process's cuBLAS had read*"
        ]
    )
    assert result.stdout.str().count("CudagraphGuardWarning") == 1
