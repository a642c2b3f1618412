"""pytest-timeout on a real GPU: a test that hangs in a CUDA graph's capture, run in a process
of its own under xdist, fails by pytest-timeout's timeout and the run goes on."""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_timeout")

HANGS_IN_CAPTURE = """
import time
import torch


def test_hangs_in_capture():
    graph = torch.cuda.CUDAGraph()
    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        y = x * 2
        time.sleep(120)  # never ends its capture


def test_after_on_the_gpu():
    assert torch.ones(8, device="cuda").sum().item() == 8
"""


@pytest.mark.parametrize("method", ["signal", "thread"])
def test_a_test_hung_in_capture_fails_by_timeout_and_the_run_goes_on(
    gpu_tester: pytest.Pytester, method: str
) -> None:
    gpu_tester.makepyfile(HANGS_IN_CAPTURE)
    result = gpu_tester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "timeout",  # the inner sessions start without the test extra's plugins (tests/conftest)
        "--timeout=20",
        f"--timeout-method={method}",
        "--cudagraph-subprocess",
        "-n",
        "2",
    )
    output = result.stdout.str()
    assert "INTERNALERROR" not in output
    result.assert_outcomes(failed=1, passed=1)
    # Under the signal method the capture's end may raise in turn, pytest-timeout's failure its
    # context; the failure shows pytest-timeout's message either way.
    result.stdout.fnmatch_lines(["*Timeout (>20.0s) from pytest-timeout*"])
