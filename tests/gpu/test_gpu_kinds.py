"""torch's CUDA-graph failures and findings on a real GPU: an output overwritten by a later
replay, a tensor left in the graph pool, a graph recorded again (a static input moved, a new
input size), the fast path left (pending backward), settings of a unittest suite that records
through the trees API, and autograd's thread named."""

from __future__ import annotations

from typing import Any

import pytest

from ..helpers import records_by_name

KINDS_SUITE = """
import pytest
import torch
from torch._inductor.cudagraph_trees import check_memory_pool, reset_cudagraph_trees


@pytest.fixture(autouse=True)
def fresh_state():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    reset_cudagraph_trees()


def test_overwritten_output():
    # torch's own example: the warm-up's output is freed when the next call records
    compiled = torch.compile(lambda x: torch.sin(x) * 2, mode="reduce-overhead")
    x = torch.randn(64, device="cuda")
    outputs = [compiled(x) for _ in range(3)]
    torch.cuda.synchronize()
    for output in outputs:
        float(output.sum())


def test_pool_leak():
    pool = torch.cuda.graph_pool_handle()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        kept = torch.ones(4096, device="cuda") * 2
    torch.cuda.synchronize()
    check_memory_pool(torch.cuda.current_device(), pool, [])


def test_static_input_moved():
    model = torch.nn.Linear(16, 16, device="cuda")
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(4, 16, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        model.weight.data = torch.randn(16, 16, device="cuda")
        for _ in range(3):
            compiled(x)
    torch.cuda.synchronize()


def test_new_input_size():
    compiled = torch.compile(lambda x: torch.cos(x) + 1, mode="reduce-overhead", dynamic=True)
    for size in (8, 8, 8, 16, 16, 16):
        compiled(torch.randn(size, device="cuda"))
    torch.cuda.synchronize()


def test_pending_backward():
    compiled = torch.compile(lambda x: x * x * x, mode="reduce-overhead")
    for _ in range(6):
        out = compiled(torch.rand([4, 4], device="cuda", requires_grad=True))
    torch.cuda.synchronize()


def test_backward_in_autograd_thread():
    model = torch.nn.Linear(16, 16, device="cuda")
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(4, 16, device="cuda")
    for _ in range(4):
        torch.compiler.cudagraph_mark_step_begin()
        compiled(x).sum().backward()
        model.zero_grad(set_to_none=True)  # a kept .grad would be a graph output overwritten
    torch.cuda.synchronize()
"""

UNITTEST_TREES = """
import unittest
import torch
import torch._inductor.config as config
from torch._inductor.cudagraph_trees import cudagraphify_impl, reset_cudagraph_trees


def step(args):
    x = args[0]
    args.clear()
    return (torch.sin(x) * 2,)


class TestTrees(unittest.TestCase):
    def setUp(self):
        self.patch = config.patch(
            {
                "triton.cudagraphs": True,
                "triton.cudagraph_trees": True,
                "triton.cudagraph_unexpected_rerecord_limit": 9,
            }
        )
        self.patch.__enter__()

    def tearDown(self):
        self.patch.__exit__(None, None, None)
        reset_cudagraph_trees()

    def test_records_without_compiling(self):
        x = torch.randn(256, device="cuda")
        run = cudagraphify_impl(
            step, [x], (), device_index=x.device.index or 0, is_backward=False, is_inference=True
        )
        for _ in range(4):
            run([x])
        torch.cuda.synchronize()
"""


def kinds(record: dict[str, Any]) -> set[str | None]:
    return {error["kind"] for error in record["errors"]}


def entries(record: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [error for error in record["errors"] if error["kind"] == kind]


def test_each_kind_from_a_real_trigger(gpu_tester: pytest.Pytester) -> None:
    gpu_tester.makepyfile(test_kinds=KINDS_SUITE)
    result = gpu_tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-report", "--cudagraph-report=json:r.json"
    )
    result.assert_outcomes(passed=4, failed=2, warnings=None)
    found = records_by_name(gpu_tester.path / "r.json")

    (overwritten,) = entries(found["test_overwritten_output"], "overwritten-output")
    assert "overwritten by a subsequent run" in overwritten["message"]
    assert "cudagraph_mark_step_begin()" in overwritten["hint"]
    (leak,) = entries(found["test_pool_leak"], "pool-leak")
    assert leak["type"] == "RuntimeError"

    moved = entries(found["test_static_input_moved"], "rerecord")
    assert any("static input data pointer changed" in e["message"] for e in moved), moved
    assert all(e["type"] == "Rerecord" and e["hint"] for e in moved)
    sizes = entries(found["test_new_input_size"], "rerecord")
    assert any("a new input size" in e["message"] for e in sizes), sizes

    slow = entries(found["test_pending_backward"], "slow-path")
    assert slow, found["test_pending_backward"]["errors"]
    assert any("backward" in e["message"] for e in slow)
    assert found["test_pending_backward"]["outcome"] == "passed"  # findings fail nothing

    threads = found["test_backward_in_autograd_thread"]["activity"]["by_thread"]
    assert "autograd thread" in threads, threads
    assert not any(name.startswith("Dummy-") for name in threads)
    result.stdout.fnmatch_lines(["*(kind: overwritten-output)*"])
    result.stdout.fnmatch_lines(["*(kind: pool-leak)*"])


def test_a_finding_fails_a_test_where_fail_on_names_it(gpu_tester: pytest.Pytester) -> None:
    gpu_tester.makepyfile(test_kinds=KINDS_SUITE)
    result = gpu_tester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-k",
        "new_input_size",
        "--cudagraph-fail-on=rerecord",
        "--cudagraph-report=json:r.json",
    )
    record = records_by_name(gpu_tester.path / "r.json")["test_new_input_size"]
    assert record["outcome"] == "error"  # failed at teardown
    result.stdout.fnmatch_lines(["*rerecord*"])


def test_unittest_recording_through_the_trees_api(gpu_tester: pytest.Pytester) -> None:
    """setUp patches the config, tearDown restores it, the test records through the trees API
    without compiling: the settings are those torch recorded under, with no value 'at the
    end'."""
    gpu_tester.makepyfile(test_trees=UNITTEST_TREES)
    result = gpu_tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-report=term-all", "--cudagraph-report=json:r.json"
    )
    result.assert_outcomes(passed=1)
    record = records_by_name(gpu_tester.path / "r.json")[
        "TestTrees::test_records_without_compiling"
    ]
    assert record["activity"]["compiled"] == []
    assert record["activity"]["recorded"] >= 1
    assert record["settings"]["triton.cudagraphs"] == {"value": True, "source": "test"}
    limit = "triton.cudagraph_unexpected_rerecord_limit"
    assert record["settings"][limit] == {"value": 9, "source": "test"}
    assert record["settings_varied"] == {}
    words = " ".join(line.strip() for line in result.stdout.lines)  # settings wrap over lines
    assert "triton.cudagraphs=True (test)" in words
    result.stdout.no_fnmatch_line("*at the end*")
