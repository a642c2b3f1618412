"""What a record says on real suites: a record for every test, settings as compiled with, errors
that are exceptions, leaks, backends, findings, --cudagraph-fail-on and unwritable paths."""

from __future__ import annotations

import _thread
import threading
from typing import Any

import pytest

from pytest_cudagraph_guard._torch import observe
from pytest_cudagraph_guard._torch.events import CrossThread, TorchEvent

from ..conftest import QUIET_INI
from ..helpers import read_report, records_by_name

UNITTEST_SUITE = """
import unittest
import pytest
import torch
import torch._inductor.config as config

def step(x):
    return torch.sin(x) * 2 + torch.cos(x)

class TestGraphs(unittest.TestCase):
    def setUp(self):
        self.patch = config.patch({"triton.cudagraphs": True})
        self.patch.__enter__()

    def tearDown(self):
        self.patch.__exit__(None, None, None)

    def test_compiles(self):
        torch._dynamo.reset()
        torch.compile(step)(torch.ones(8))

    def test_passes_without_compiling(self):
        pass

    @unittest.skipIf(True, "not on this machine")
    def test_skipped_by_skipif(self):
        pass

class TestTearDownFails(unittest.TestCase):
    def tearDown(self):
        raise RuntimeError("tearDown broke")

    def test_body(self):
        pass

class TestPlainClass:
    def test_method(self):
        pass

@pytest.mark.parametrize("n", [1, 2])
def test_parametrized(n):
    pass

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_setup_error(broken_setup):
    pass

def test_teardown_error(broken_teardown):
    pass

def test_fails():
    assert 1 == 2

def test_skipped():
    pytest.skip("not today")
"""


def test_every_test_that_ran_has_a_record(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=UNITTEST_SUITE)
    result = ourtester.runpytest("--cudagraph-report", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=6, failed=2, skipped=2, errors=2)
    records = records_by_name(ourtester.path / "r.json")
    assert {name: r["outcome"] for name, r in records.items()} == {
        "TestGraphs::test_compiles": "passed",
        "TestGraphs::test_passes_without_compiling": "passed",
        "TestGraphs::test_skipped_by_skipif": "skipped",
        "TestTearDownFails::test_body": "failed",  # unittest's tearDown runs in the call phase
        "TestPlainClass::test_method": "passed",
        "test_parametrized[1]": "passed",
        "test_parametrized[2]": "passed",
        "test_setup_error": "error",
        "test_teardown_error": "error",
        "test_fails": "failed",
        "test_skipped": "skipped",
    }
    assert records["test_fails"]["errors"][0]["kind"] is None
    assert records["test_skipped"]["errors"] == []
    # term shows the tests worth a look and counts the rest
    result.stdout.fnmatch_lines(["*= cudagraph report =*", "6 more tests with nothing to show"])
    result.stdout.no_fnmatch_line("test_suite.py::test_parametrized*")
    result.stdout.fnmatch_lines(["*error [[]MainThread]: AssertionError: *(kind: unclassified)"])
    result.stdout.no_fnmatch_line("*kind: None*")
    summary = read_report(ourtester.path / "r.json")["summary"]
    assert summary["tests"] == 11
    assert summary["errors_by_kind"] == {"unclassified": 4}
    every = ourtester.runpytest("--cudagraph-report=term-all")
    every.stdout.fnmatch_lines(["test_suite.py::test_parametrized[[]1]  passed  [[]main]"])
    every.stdout.no_fnmatch_line("*with nothing to show")


@pytest.mark.wide
def test_settings_are_those_torch_compiled_with(ourtester: pytest.Pytester) -> None:
    """setUp turns CUDA graphs on, tearDown restores them: the record says what the compile had
    (the value at the end is for JSON only), and the terminal that value alone."""
    ourtester.makepyfile(test_suite=UNITTEST_SUITE)
    result = ourtester.runpytest(
        "-k", "test_compiles", "--cudagraph-report=term-all", "--cudagraph-report=json:r.json"
    )
    result.assert_outcomes(passed=1)
    record = records_by_name(ourtester.path / "r.json")["TestGraphs::test_compiles"]
    assert record["settings"]["triton.cudagraphs"] == {"value": True, "source": "test"}
    assert record["settings_at_end"]["triton.cudagraphs"]["value"] is False
    compiled = record["activity"]["compiled"]
    assert [(c["backend"], c["settings"]["triton.cudagraphs"]) for c in compiled] == [
        ("inductor", True)
    ]
    assert "triton.cudagraph_trees" in compiled[0]["settings"]
    assert record["settings_varied"] == {}
    result.stdout.fnmatch_lines(["  settings: *triton.cudagraphs=True (test)*"])
    result.stdout.no_fnmatch_line("*at the end*")


def test_a_with_patch_block_restore_is_not_the_tests_value(ourtester: pytest.Pytester) -> None:
    """The value a ``with`` block put back is not shown; a second value only where torch
    compiled under it too."""
    ourtester.makepyfile(
        """
        import torch
        import torch._inductor.config as config

        def test_block(inductor_config):
            torch._dynamo.reset()
            with config.patch({"triton.cudagraphs": True}):
                torch.compile(lambda x: x * 3)(torch.ones(4))

        def test_compiles_under_both(inductor_config):
            torch._dynamo.reset()
            with config.patch({"triton.cudagraphs": True}):
                torch.compile(lambda x: x * 3)(torch.ones(4))
            torch.compile(lambda x: x * 5)(torch.ones(4))
        """
    )
    result = ourtester.runpytest("--cudagraph-report=term-all", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=2)
    records = records_by_name(ourtester.path / "r.json")
    block = records["test_block"]
    assert block["settings"]["triton.cudagraphs"] == {"value": True, "source": "test"}
    assert block["settings_varied"] == {}
    assert records["test_compiles_under_both"]["settings_varied"] == {
        "triton.cudagraphs": [True, False]
    }
    result.stdout.fnmatch_lines(["  settings: *triton.cudagraphs=True (test)*"])
    result.stdout.fnmatch_lines(["*triton.cudagraphs=True (test), also False*"])
    result.stdout.no_fnmatch_line("*at the end*")


def test_a_skip_in_a_thread_is_an_outcome_not_an_error(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_thread(threads=2)
        def test_skips():
            pytest.skip("not today")
        """
    )
    result = ourtester.runpytest("--cudagraph-report", "--cudagraph-report=json:r.json")
    result.assert_outcomes(skipped=1)
    record = read_report(ourtester.path / "r.json")["tests"][0]
    assert (record["outcome"], record["errors"]) == ("skipped", [])
    result.stdout.no_fnmatch_line("*error:*")


def test_leaks_are_in_the_record_named_as_the_user_wrote_them(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import torch._dynamo.config as dynamo_config
        import torch._inductor.config as config

        def test_leaks():
            config.triton.cudagraphs = True

        def test_leaks_an_alias():
            dynamo_config.cache_size_limit = 3

        def test_clean():
            pass
        """
    )
    result = ourtester.runpytest(
        "--cudagraph-report", "--cudagraph-report=json:r.json", "-W", "ignore"
    )
    result.assert_outcomes(passed=3)
    records = records_by_name(ourtester.path / "r.json")
    assert records["test_leaks"]["leaks"] == [
        {
            "key": "torch._inductor.config.triton.cudagraphs",
            "before": False,
            "after": True,
            "alias_of": None,
        }
    ]
    [alias] = records["test_leaks_an_alias"]["leaks"]
    if alias["alias_of"] is not None:  # torch with config aliases (2.6+)
        assert alias["key"] == "torch._dynamo.config.cache_size_limit"
        assert alias["alias_of"].endswith(".recompile_limit")
        result.stdout.fnmatch_lines(
            ["*leak: torch._dynamo.config.cache_size_limit (alias of recompile_limit): * -> 3"]
        )
    assert records["test_clean"]["leaks"] == []
    result.stdout.fnmatch_lines(["*leak: torch._inductor.config.triton.cudagraphs: False -> True"])


def test_the_leak_warning_names_an_alias_as_written(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import torch._dynamo.config as dynamo_config

        def test_leaks_an_alias():
            dynamo_config.cache_size_limit = 3
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(passed=1, warnings=1)
    if hasattr(__import__("torch")._dynamo.config, "recompile_limit"):
        result.stdout.fnmatch_lines(
            ["*torch._dynamo.config.cache_size_limit (alias of recompile_limit): * -> 3"]
        )


def test_every_backend_is_counted_and_named(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import threading
        import torch

        def mine(gm, example_inputs):
            return gm.forward

        def test_four_threads_eager():
            torch._dynamo.reset()
            def body(i):
                torch.compile(lambda x: x + i, backend="eager")(torch.ones(2))
            threads = [threading.Thread(target=body, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        def test_custom_and_aot_eager():
            torch._dynamo.reset()
            torch.compile(lambda x: x * 2, backend=mine)(torch.ones(2))
            torch.compile(lambda x: x * 5, backend="aot_eager")(torch.ones(2))
        """
    )
    result = ourtester.runpytest("--cudagraph-report", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=2)
    records = records_by_name(ourtester.path / "r.json")
    eager = records["test_four_threads_eager"]["activity"]["compiled"]
    assert [c["backend"] for c in eager] == ["eager"] * 4
    assert [c["cudagraphs"] for c in eager] == [False] * 4
    custom = records["test_custom_and_aot_eager"]["activity"]["compiled"]
    assert [c["backend"] for c in custom] == ["mine", "aot_eager"]
    result.stdout.fnmatch_lines(
        ["torch: 2 tests compiled (aot_eager 1, eager 4, mine 1), 0 recorded, 0 replayed"]
    )


def test_a_test_with_nothing_to_show_is_only_counted(ourtester: pytest.Pytester) -> None:
    """torch's own TORCHINDUCTOR_CACHE_DIR is no user setting; a clean test is in the summary."""
    ourtester.makepyfile(
        """
        import torch
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        def test_uses_the_fixture(inductor_config):
            cache_dir()  # torch writes its default into the environment
        """
    )
    result = ourtester.runpytest("--cudagraph-report", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=1)
    lines = result.stdout.str().split("= cudagraph report =")[1].splitlines()[1:]
    assert lines[0] == "no test had an error, a finding, a leak or a CUDA-graph skip"
    assert lines[2] == "1 test: 1 passed"
    assert (
        "TORCHINDUCTOR_CACHE_DIR" not in read_report(ourtester.path / "r.json")["tests"][0]["env"]
    )
    every = ourtester.runpytest("--cudagraph-report=term-all")
    every.stdout.fnmatch_lines(["  settings: *triton.cudagraphs=False (default)*", "  activity: *"])


class _StandInManager:
    """Has what the observers read of a CUDAGraphTreeManager (torch < 2.13); named as torch's,
    as the table of patches names its owner."""

    def __init__(self, device_index: int) -> None:
        self.ids_to_stack_traces = {
            7: ['File "/src/trainer.py", line 12, in shared_step\n    return x * 2\n']
        }
        self.runs: list[str] = []

    def run(self, new_inputs: list[Any], function_id: int) -> list[Any]:
        self.runs.append(threading.current_thread().name)
        return new_inputs


_StandInManager.__module__ = "torch._inductor.cudagraph_trees"
_StandInManager.__qualname__ = "CUDAGraphTreeManager"


class _StandInTrees:
    CUDAGraphTreeManager = _StandInManager


def test_a_graph_run_through_another_threads_manager_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The observers' own path on torch < 2.13: a manager made in one thread, a compiled
    function's call (``functools.partial(manager.run, function_id=...)``) from another."""
    events: list[TorchEvent] = []
    monkeypatch.setattr(observe, "shares_callables_across_threads", lambda: True)
    monkeypatch.setattr(observe, "patch_tree_events", lambda *args: None)  # not the stand-in's
    observe.start_observing(events.append)
    try:
        observe._patch_trees(_StandInTrees)  # type: ignore[arg-type]
        manager = _StandInTrees.CUDAGraphTreeManager(0)
        manager.run([1], function_id=7)  # the creating thread: nothing to say
        other = threading.Thread(target=lambda: manager.run([2], function_id=7), name="drafter-1")
        other.start()
        other.join()
        done = threading.Event()  # a thread Python did not start, as autograd's engine threads

        def like_autograd() -> None:
            manager.run([3], function_id=7)
            done.set()

        _thread.start_new_thread(like_autograd, ())
        done.wait(10)
    finally:
        observe.stop_observing(events.append)  # puts the stand-in's methods back too
    assert manager.runs[:2] == ["MainThread", "drafter-1"]
    assert manager.runs[2].startswith("Dummy-")
    assert [e for e in events if isinstance(e, CrossThread)] == [
        CrossThread("drafter-1", "MainThread", "shared_step (trainer.py:12)")
    ]


CROSS_THREAD_TEST = """
import threading
import pytest
from pytest_cudagraph_guard._torch import observe

class Manager:
    def __init__(self, device_index):
        self.ids_to_stack_traces = {3: ['File "t.py", line 4, in step\\n']}

    def run(self, new_inputs, function_id):
        return new_inputs

Manager.__module__ = "torch._inductor.cudagraph_trees"  # named as torch's, as the table of
Manager.__qualname__ = "CUDAGraphTreeManager"  # patches names its owner

class Trees:
    CUDAGraphTreeManager = Manager

@pytest.fixture
def stand_in_trees(monkeypatch):
    monkeypatch.setattr(observe, "shares_callables_across_threads", lambda: True)
    observe._patch_trees(Trees)
    yield Trees

def shared_run(trees, threads):
    manager = trees.CUDAGraphTreeManager(0)
    workers = [
        threading.Thread(target=manager.run, args=([0],), kwargs={"function_id": 3},
                         name=f"drafter-{i}")
        for i in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

def test_shared(stand_in_trees):
    shared_run(stand_in_trees, 2)

def test_per_thread(stand_in_trees):
    def own():
        manager = stand_in_trees.CUDAGraphTreeManager(0)
        manager.run([0], function_id=3)
    workers = [threading.Thread(target=own) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
"""


def test_cross_thread_graph_is_a_finding_in_the_record(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_cross=CROSS_THREAD_TEST)
    result = ourtester.runpytest("--cudagraph-report", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=2)  # a finding fails nothing by itself
    records = records_by_name(ourtester.path / "r.json")
    errors = records["test_shared"]["errors"]
    assert sorted((e["thread"], e["kind"]) for e in errors) == [
        ("drafter-0", "cross-thread-graph"),
        ("drafter-1", "cross-thread-graph"),
    ]
    assert "step (t.py:4)" in errors[0]["message"]
    assert "'MainThread'" in errors[0]["message"]
    assert records["test_per_thread"]["errors"] == []
    result.stdout.fnmatch_lines(["*(kind: cross-thread-graph)"])


# A test of each problem the report names: a leak, a cudagraph skip, a thread error and a
# divergence (shared with the JSON boundary's test).
PROBLEM_TESTS = """
import threading
import pytest
import torch
import torch._inductor.config as config

def test_leaks():
    config.triton.cudagraphs = True

def test_skips_cudagraphs():
    torch._dynamo.reset()
    torch.compile(lambda x: torch.sin(x) + 1, mode="reduce-overhead")(torch.ones(4))

def test_thread_error():
    def drafter():
        raise ValueError("drafter broke")
    thread = threading.Thread(target=drafter, name="drafter-3")
    thread.start()
    thread.join()

def test_diverges(cudagraphs):
    torch._dynamo.reset()
    thread = threading.Thread(
        target=lambda: torch.compile(lambda x: x * 7)(torch.ones(4)), name="drafter-9"
    )
    thread.start()
    thread.join()
"""
FAIL_ON_SUITE = (
    PROBLEM_TESTS
    + """
def test_clean():
    pass
"""
)


@pytest.mark.parametrize(
    ("kind", "failing", "detail"),
    [
        ("leak", "test_leaks", "leak in thread MainThread: torch._inductor.config.triton.*"),
        ("cudagraph-skip", "test_skips_cudagraphs", "cudagraph-skip in thread MainThread: skip*"),
        ("thread-error", "test_thread_error", "thread-error in thread drafter-3: ValueError: *"),
    ],
)
def test_fail_on_fails_the_test_with_that_kind_only(
    ourtester: pytest.Pytester, kind: str, failing: str, detail: str
) -> None:
    ourtester.makepyfile(test_suite=FAIL_ON_SUITE)
    result = ourtester.runpytest(
        f"--cudagraph-fail-on={kind}", "-W", "ignore", "-k", "not diverges"
    )
    result.assert_outcomes(passed=4, errors=1)  # 4 bodies passed; one test errors at teardown
    result.stdout.fnmatch_lines(
        [
            f"*ERROR at teardown of {failing}*",
            f"--cudagraph-fail-on: test_suite.py::{failing} holds 1 entry(ies) to fail on:",
            detail,
        ]
    )


def test_fail_on_config_divergence(ourtester: pytest.Pytester) -> None:
    from pytest_cudagraph_guard._torch.cudagraph_settings import config_is_process_wide

    ourtester.makepyfile(test_suite=FAIL_ON_SUITE)
    result = ourtester.runpytest(
        "--cudagraph-fail-on=config-divergence", "-W", "ignore", "--cudagraph-report=json:r.json"
    )
    if config_is_process_wide():  # torch <= 2.11: a thread compiles with the test's settings
        result.assert_outcomes(passed=5)
        return
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_diverges*", "config-divergence in thread drafter-9: *"]
    )
    record = records_by_name(ourtester.path / "r.json")["test_diverges"]
    assert record["outcome"] == "error"


def test_fail_on_cross_thread_graph(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_cross=CROSS_THREAD_TEST)
    result = ourtester.runpytest("--cudagraph-fail-on=cross-thread-graph")
    result.assert_outcomes(passed=2, errors=1)  # the body passed; its teardown errors
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_shared*", "cross-thread-graph in thread drafter-*: *step*"]
    )


def test_the_header_says_what_options_applied(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest

        def test_one():
            pass

        def test_two():
            pass

        @pytest.mark.cudagraph_main_thread
        def test_main():
            pass
        """
    )
    result = ourtester.runpytest(
        "--cudagraph-threads=2",
        "--cudagraph-tls=init",
        "--cudagraph-fail-on=leak",
        "--cudagraph-report",
        "--cudagraph-report=json:r.json",
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["*= cudagraph report =*", "cudagraph_thread applied to 2 tests by --cudagraph-threads"]
    )
    document = read_report(ourtester.path / "r.json")
    options = document["environment"]["options"]
    assert {key: options[key] for key in ("threads", "tls", "subprocess", "fail_on")} == {
        "threads": 2,
        "tls": "init",
        "subprocess": False,
        "fail_on": ["leak"],
    }
    applied = {
        name: r["applied_by"] for name, r in records_by_name(ourtester.path / "r.json").items()
    }
    assert applied == {
        "test_one": "--cudagraph-threads",
        "test_two": "--cudagraph-threads",
        "test_main": None,
    }


@pytest.mark.wide
def test_the_header_counts_subprocess_tests(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    result = ourtester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-subprocess", "--cudagraph-report"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["cudagraph_subprocess applied to 2 tests by --cudagraph-subprocess"]
    )


@pytest.mark.wide
def test_an_ini_key_that_applied_a_marker_is_named_as_such(ourtester: pytest.Pytester) -> None:
    ourtester.makeini(f"{QUIET_INI}cudagraph_subprocess = yes\n")
    ourtester.makepyfile("def test_one():\n    pass\n")
    result = ourtester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-report", "--cudagraph-report=json:r.json"
    )
    result.assert_outcomes(passed=1)
    banner = "cudagraph_subprocess applied to 1 test by ini option cudagraph_subprocess"
    assert result.stdout.lines.count(banner) == 2, result.stdout.str()  # header and report
    result.stdout.no_fnmatch_line("*by --cudagraph-subprocess*")
    [record] = read_report(ourtester.path / "r.json")["tests"]
    assert record["applied_by"] == "ini option cudagraph_subprocess"


def test_a_report_that_cannot_be_written_at_the_end_is_one_line_and_fails_the_run(
    ourtester: pytest.Pytester,
) -> None:
    """/proc passes the check at the start (root may write there, says the system) and refuses
    the file at the end: the tests passed, the run did not."""
    ourtester.makeini(QUIET_INI)
    ourtester.makepyfile("def test_one():\n    pass\n")
    result = ourtester.runpytest("-p", "no:cacheprovider", "--cudagraph-report=json:/proc/x.json")
    if result.ret == pytest.ExitCode.USAGE_ERROR:  # not root: seen at the start
        result.stderr.fnmatch_lines(["ERROR: --cudagraph-report: cannot write json:/proc/x.json*"])
        return
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(
        ["cudagraph report: could not write json:/proc/x.json (*)", "*= 1 passed in *"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
