"""Spares that set up CUDA ahead of their tests, on a real GPU: later tests find CUDA initialised
in their process (never in the zygote), run CUDA graphs, and no process outlives the session."""

from __future__ import annotations

import pytest

from ..procfs import all_gone

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
