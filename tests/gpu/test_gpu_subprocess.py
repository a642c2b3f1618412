"""@pytest.mark.cudagraph_subprocess on a real GPU: CUDA graphs in the test process, and a fresh
CUDA context for it even after the parent has used CUDA."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..helpers import records_by_name

pytestmark = pytest.mark.processes  # it forks or starts processes itself


def test_reduce_overhead_in_a_test_process_after_cuda_in_the_parent(
    gpu_tester: pytest.Pytester,
) -> None:
    gpu_tester.makepyfile(
        """
        import os
        import pytest
        import torch

        def step(x):
            return torch.sin(x) * 2 + torch.cos(x)

        def test_cuda_in_the_parent():
            torch.ones(1024, device="cuda").sum().item()
            assert torch.cuda.is_initialized()
            os.environ["PARENT_PID"] = str(os.getpid())

        @pytest.mark.cudagraph_subprocess(require_cuda=True)
        def test_fresh_cuda_and_cuda_graphs():
            assert os.getpid() != int(os.environ["PARENT_PID"])
            assert os.getppid() != int(os.environ["PARENT_PID"])  # a fork of the zygote
            assert not torch.cuda.is_initialized()
            assert not torch._C._cuda_isInBadFork()
            compiled = torch.compile(step, mode="reduce-overhead")
            x = torch.randn(1024, device="cuda")
            for _ in range(4):
                out = compiled(x)
            torch.cuda.synchronize()
            torch.testing.assert_close(out, step(x))
            assert torch.cuda.is_initialized()
        """
    )
    result = gpu_tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-report", "--cudagraph-report=json:r.json"
    )
    result.assert_outcomes(passed=2)
    assert "fresh interpreter" not in result.stdout.str()  # no fallback to spawning
    record = records_by_name(Path(gpu_tester.path, "r.json"))["test_fresh_cuda_and_cuda_graphs"]
    assert record["where"].startswith("subprocess ")
    assert record["activity"]["recorded"] >= 1
    assert record["activity"]["replays"] >= 1
    assert record["errors"] == []


CRASH_AFTER_REPLAYS = """
import ctypes
import pytest
import torch

def step(x):
    return x * 2 + 1

{marker}
def test_crashes_after_replaying():
    compiled = torch.compile(step, mode="reduce-overhead")
    x = torch.randn(64, device="cuda")
    for _ in range(3):
        compiled(x)
    torch.cuda.synchronize()
    ctypes.string_at(0)

def test_after():
    assert torch.ones(2, device="cuda").sum().item() == 2
"""
# Three calls: a warm-up, a recording, a replay at least (how many is torch's to say).
REPLAYED = "it died after replay * of a graph of `step (test_crash.py:6)` in thread `MainThread`"


@pytest.mark.parametrize(
    ("marker", "runner"),
    [("@pytest.mark.cudagraph_subprocess", ()), ("", ("-n", "2"))],
    ids=["marker", "xdist"],
)
def test_a_crash_in_a_cuda_test_process_names_the_graph_it_replayed(
    gpu_tester: pytest.Pytester, marker: str, runner: tuple[str, ...]
) -> None:
    gpu_tester.makepyfile(test_crash=CRASH_AFTER_REPLAYS.format(marker=marker))
    result = gpu_tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-report=json:r.json", *runner
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test process died with SIGSEGV (signal 11)*", REPLAYED])
    [error] = records_by_name(gpu_tester.path / "r.json")["test_crashes_after_replaying"]["errors"]
    assert error["kind"] == "process-crash"
    assert fnmatch.fnmatch(
        error["message"], f"test process died with SIGSEGV (signal 11); {REPLAYED}"
    )


ZYGOTE_VERDICTS = """
import numpy, torch
from pytest_cudagraph_guard.isolation import forking

assert forking._mapped_cuda_driver() is not None, "torch maps the CUDA driver on import"
assert not forking._cuda_driver_initialized()
print("after import torch:", forking.fork_hazard())
a = numpy.ones((512, 512))
a @ a
print("after numpy's pool ran:", forking.fork_hazard())
torch.cuda.init()
print("after torch.cuda.init():", forking._cuda_driver_initialized(), forking.fork_hazard())
"""


def test_the_zygote_forks_until_cuda_is_initialised() -> None:
    """torch maps the CUDA driver library on import and numpy's OpenBLAS starts a thread pool:
    neither stops a fork (the pool ends itself at one), while an initialised driver does."""
    verdicts = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ZYGOTE_VERDICTS)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert verdicts[:2] == ["after import torch: None", "after numpy's pool ran: None"]
    assert verdicts[2].startswith("after torch.cuda.init(): True the zygote has ")
