"""--cudagraph-subprocess and --cudagraph-threads on real CUDA suites (the H200, torch 2.11)."""

from __future__ import annotations

import pytest

from ..helpers import LAZY_THREAD_STATE

SMALL_CUDA_SUITE = """
import ctypes
import pytest
import torch


def captured_step(size):
    x = torch.randn(size, device="cuda")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = x * 2 + 1  # warm-up on a side stream, as torch's docs do before capture
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        y = x * 2 + 1
    graph.replay()
    torch.cuda.synchronize()
    return x, y


@pytest.mark.parametrize("n", range(198))
def test_small(n):
    x, y = captured_step(256 + n)
    torch.testing.assert_close(y, x * 2 + 1)


def test_null_write_inside_a_captured_region():
    x = torch.randn(256, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
        ctypes.memset(0, 1, 8)  # a host-side crash while the stream captures


def test_illegal_memory_access():
    nowhere = torch._C._construct_storage_from_data_pointer(
        0xDEAD0000, torch.device("cuda"), 1024
    )
    bad = torch.empty(0, device="cuda").set_(nowhere, 0, (256,), (1,))
    (bad + 1).sum().item()  # a kernel reads an address that was never allocated
"""


@pytest.mark.parametrize("spread", [[], ["-n", "4"]], ids=["serial", "xdist"])
def test_a_cuda_suite_with_two_crashes_runs_to_its_end(
    gpu_tester: pytest.Pytester, spread: list[str]
) -> None:
    gpu_tester.makepyfile(test_small_cuda=SMALL_CUDA_SUITE)
    result = gpu_tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-subprocess", *spread
    )
    result.assert_outcomes(passed=198, failed=2)
    result.stdout.fnmatch_lines(["FAILED *test_null_write_inside_a_captured_region*"])
    result.stdout.fnmatch_lines(["FAILED *test_illegal_memory_access*"])
    result.stdout.fnmatch_lines(["*test process died with SIGSEGV (signal 11)*"])


REDUCE_OVERHEAD_SUITE = """
import torch


def step(x):
    return torch.sin(x) * 2 + torch.cos(x)


def test_first():
    compiled = torch.compile(step, mode="reduce-overhead")
    x = torch.randn(1024, device="cuda")
    for _ in range(3):
        out = compiled(x)
    torch.testing.assert_close(out, step(x))


def test_second():
    compiled = torch.compile(lambda x: step(x) + 1, mode="reduce-overhead")
    x = torch.randn(2048, device="cuda")
    for _ in range(3):
        out = compiled(x)
    torch.testing.assert_close(out, step(x) + 1)
"""


@LAZY_THREAD_STATE.skip_where_fixed
def test_the_threads_audit_lists_each_reduce_overhead_test_and_init_fixes_them(
    gpu_tester: pytest.Pytester,
) -> None:
    gpu_tester.makepyfile(test_reduce_overhead=REDUCE_OVERHEAD_SUITE)
    audit = gpu_tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-threads=1", "--cudagraph-report"
    )
    audit.assert_outcomes(failed=2)
    assert audit.stdout.str().count("(kind: tls-missing)") == 2
    fixed = gpu_tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-threads=1", "--cudagraph-tls=init"
    )
    fixed.assert_outcomes(passed=2)
