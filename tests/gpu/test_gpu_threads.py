"""cudagraph_thread on a real GPU: torch.compile(mode="reduce-overhead") in fresh threads."""

from __future__ import annotations

import textwrap

import pytest

from ..helpers import LAZY_THREAD_STATE, read_report
from .drafters import drafter_suite


@LAZY_THREAD_STATE.skip_where_fixed
def test_native_threads_fail_with_tls_missing_and_its_hint(gpu_tester: pytest.Pytester) -> None:
    gpu_tester.makepyfile(drafter_suite(threads=2, tls="native"))
    result = gpu_tester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError*",
            "*[[]2 of 2 threads: *] raised this",
            "*kind: tls-missing",
            "*hint: torch 2.* creates CUDAGraph Trees per-thread state*",
            "*cudagraph_trees.py:*: AssertionError",
        ]
    )


def test_tls_init_thread_passes(gpu_tester: pytest.Pytester) -> None:
    gpu_tester.makepyfile(drafter_suite(threads=1, tls="init"))
    gpu_tester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.parametrize("run", range(5))
def test_eight_drafter_threads_capture_at_once_with_tls_init(
    gpu_tester: pytest.Pytester, run: int
) -> None:
    gpu_tester.makepyfile(drafter_suite(threads=8, tls="init"))
    result = gpu_tester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_trees_off_in_eight_native_threads(gpu_tester: pytest.Pytester) -> None:
    """What trees=False does on this torch: the session must end, each error named."""
    gpu_tester.makepyfile(drafter_suite(threads=8, tls="native", trees=False))
    result = gpu_tester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    outcomes = result.parseoutcomes()
    print("trees=False, tls=native, 8 threads:", outcomes)
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1


def test_capture_errors_without_serialization_are_all_classified(
    gpu_tester: pytest.Pytester,
) -> None:
    """TLS readied by hand but captures not serialized (FACTS.md: about half the threads fail
    on torch 2.11): whatever fails must be named, never left as a plain thread error."""
    suite = drafter_suite(threads=8, tls="native").replace(
        "def drafter_step():\n",
        "def drafter_step():\n    import pytest_cudagraph_guard as g\n"
        "    g.ensure_cudagraph_tls()\n",
    )
    gpu_tester.makepyfile(suite)
    result = gpu_tester.runpytest_subprocess("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    print("tls by hand, no serialization, 8 threads:", outcomes)
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1
    if "cudaErrorStreamCapture" in result.stdout.str():
        result.stdout.fnmatch_lines(["*kind: capture-conflict*"])


SYNCHRONIZE_DURING_CAPTURE = """
    import threading

    import pytest
    import torch

    capturing = threading.Event()
    synchronized = threading.Event()

    @pytest.mark.cudagraph_thread(threads=2, tls="{tls}")
    def test_synchronize_during_capture():
        if threading.current_thread().name == "cudagraph-thread-0":
            x = torch.ones(16, device="cuda")
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = x * 2
                capturing.set()
                synchronized.wait(30)
        else:
            capturing.wait(30)
            try:
                torch.cuda.synchronize()
            finally:
                synchronized.set()
"""


@LAZY_THREAD_STATE.skip_where_fixed
@pytest.mark.parametrize(
    ("tls", "hint_says"),
    [
        ("init", "tls='init') serializes CUDAGraph Trees' warm-up and capture here"),
        ("native", "does not serialize warm-up and capture"),
    ],
)
def test_a_capture_conflict_hint_says_what_tls_init_covered(
    gpu_tester: pytest.Pytester, tls: str, hint_says: str
) -> None:
    """One thread synchronizes while another captures: under tls="init" the hint must not
    advise tls="init", which serializes torch's captures, not a synchronize elsewhere."""
    gpu_tester.makepyfile(textwrap.dedent(SYNCHRONIZE_DURING_CAPTURE).format(tls=tls))
    result = gpu_tester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-report=json:report.json"
    )
    result.assert_outcomes(failed=1)
    document = read_report(gpu_tester.path / "report.json")
    (record,) = document["tests"]
    conflicts = [e for e in record["errors"] if e["kind"] == "capture-conflict"]
    assert {e["thread"] for e in conflicts} == {"cudagraph-thread-0", "cudagraph-thread-1"}
    assert all(hint_says in e["hint"] for e in conflicts), conflicts


def test_cudagraphs_fixture_records_and_replays_then_resets(gpu_tester: pytest.Pytester) -> None:
    gpu_tester.makepyfile(
        """
        import torch
        import torch._inductor.cudagraph_trees as cgt
        import torch._inductor.config as ic

        def test_compiled(cudagraphs):
            step = torch.compile(lambda x: torch.sin(x) * 2 + torch.cos(x))
            x = torch.randn(1024, device="cuda")
            for _ in range(3):
                out = step(x)
            torch.testing.assert_close(out, torch.sin(x) * 2 + torch.cos(x))
            manager = cgt.get_container(0).tree_manager
            assert manager is not None and len(manager.roots) >= 1

        def test_after():
            assert ic.triton.cudagraphs is False
            assert cgt.get_container(0).tree_manager is None
        """
    )
    gpu_tester.runpytest("--cudagraph-guard=fail").assert_outcomes(passed=2)


def test_require_cuda_runs_where_a_device_is_visible(gpu_tester: pytest.Pytester) -> None:
    gpu_tester.makepyfile(
        """
        import pytest
        import torch

        @pytest.mark.cudagraph_thread(require_cuda=True)
        def test_needs_gpu():
            assert torch.ones(1, device="cuda").item() == 1.0
        """
    )
    gpu_tester.runpytest().assert_outcomes(passed=1)
