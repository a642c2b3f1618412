"""@pytest.mark.cudagraph_thread in real pytest sessions, with real threads and real torch."""

from __future__ import annotations

import sys

import pytest
import torch

from ..helpers import FX_TRACING_PER_THREAD, LEGACY_CONFTEST


def test_body_runs_in_named_threads_released_together(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest(
        """
        import threading
        import time
        import pytest

        STARTED = []

        @pytest.fixture
        def slow_thread_starts(monkeypatch):
            start = threading.Thread.start

            def slow_start(self):
                STARTED.append(self.name)
                start(self)
                time.sleep(0.05)

            monkeypatch.setattr(threading.Thread, "start", slow_start)
        """
    )
    ourtester.makepyfile(
        """
        import threading
        import pytest
        from conftest import STARTED

        SEEN = []

        @pytest.mark.cudagraph_thread(threads=4)
        def test_body(slow_thread_starts):
            mine = threading.current_thread()
            SEEN.append((mine.name, mine is threading.main_thread(), len(STARTED)))

        def test_check():
            assert sorted(SEEN) == [(f"cudagraph-thread-{i}", False, 4) for i in range(4)]
        """
    )
    ourtester.runpytest().assert_outcomes(passed=2)


def test_fixtures_run_once_in_the_main_thread_and_their_config_reaches_the_threads(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        import contextvars
        import threading
        import pytest

        REQUEST_ID = contextvars.ContextVar("request_id", default=None)
        SETUPS = []

        @pytest.fixture
        def tuned(inductor_config):
            SETUPS.append(threading.current_thread().name)
            inductor_config["max_autotune"] = True
            REQUEST_ID.set("from-fixture")
            yield "value"
            SETUPS.append(threading.current_thread().name)
        """
    )
    ourtester.makepyfile(
        """
        import pytest
        import torch._inductor.config as ic
        from conftest import REQUEST_ID, SETUPS

        @pytest.mark.cudagraph_thread(threads=3)
        def test_body(tuned):
            assert tuned == "value"
            assert ic.max_autotune is True
            assert REQUEST_ID.get() == "from-fixture"

        def test_setup_and_teardown_ran_once_in_main():
            assert SETUPS == ["MainThread", "MainThread"]
            assert ic.max_autotune is False
        """
    )
    ourtester.runpytest("--cudagraph-guard=fail").assert_outcomes(passed=2)


@pytest.mark.parametrize("trees", [True, False])
def test_threads_have_cudagraphs_on_and_nothing_they_set_survives(
    ourtester: pytest.Pytester, trees: bool
) -> None:
    ourtester.makepyfile(
        f"""
        import pytest
        import torch._inductor.config as ic
        import torch._dynamo.config as dc

        @pytest.mark.cudagraph_thread(threads=2, trees={trees})
        def test_body():
            assert ic.triton.cudagraphs is True
            assert ic.triton.cudagraph_trees is {trees}
            ic.max_autotune = True
            dc.suppress_errors = True

        def test_after():
            assert ic.triton.cudagraphs is False and ic.triton.cudagraph_trees is True
            assert ic.max_autotune is False and dc.suppress_errors is False
        """
    )
    ourtester.runpytest("--cudagraph-guard=fail").assert_outcomes(passed=2)


def test_every_failing_thread_is_shown_under_its_name(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import threading
        import pytest

        @pytest.mark.cudagraph_thread(threads=3)
        def test_body():
            name = threading.current_thread().name
            if name != "cudagraph-thread-1":
                value = 41 if name == "cudagraph-thread-0" else 40
                assert value == 42, name
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: cudagraph-thread-0",
            "*assert 41 == 42",
            "*cudagraph_thread: 2 of 3 threads failed, 2 different ways",
            "*[[]cudagraph-thread-0] raised this",
            "*[[]cudagraph-thread-2] raised, differently:",
            "*AssertionError: cudagraph-thread-2",
        ]
    )
    result.stdout.no_fnmatch_line("*cudagraph-thread-1] raised*")


def test_one_failing_thread_keeps_pytests_own_failure_display(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_thread
        def test_body():
            value = 41
            assert value == 42
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E       assert 41 == 42", "*[[]cudagraph-thread-0] raised this"])


@pytest.mark.parametrize(
    ("body", "outcome"),
    [
        ("pytest.skip('in a thread')", {"skipped": 1}),
        ("pytest.xfail('in a thread')", {"xfailed": 1}),
        ("pytest.fail('in a thread')", {"failed": 1}),
    ],
)
def test_pytest_outcomes_inside_threads(
    ourtester: pytest.Pytester, body: str, outcome: dict[str, int]
) -> None:
    ourtester.makepyfile(
        f"""
        import pytest

        @pytest.mark.cudagraph_thread(threads=2)
        def test_body():
            {body}
        """
    )
    result = ourtester.runpytest("-rsx")
    result.assert_outcomes(**outcome)
    result.stdout.fnmatch_lines(["*in a thread*"])


def test_warnings_in_threads_obey_w_error(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import warnings
        import pytest

        @pytest.mark.cudagraph_thread(threads=2)
        def test_body():
            warnings.warn(UserWarning("raised in a drafter thread"))
        """
    )
    passing = ourtester.runpytest()
    passing.assert_outcomes(passed=1, warnings=1)
    passing.stdout.fnmatch_lines(["*UserWarning: raised in a drafter thread*"])
    result = ourtester.runpytest("-W", "error:raised in a drafter thread:UserWarning")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*UserWarning: raised in a drafter thread*"])


def test_stuck_threads_fail_the_test_with_their_stacks_and_the_session_goes_on(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(
        """
        import threading
        import pytest

        RELEASE = threading.Event()

        def wait_for_capture():
            RELEASE.wait(30)

        @pytest.mark.cudagraph_thread(threads=3, timeout=0.5)
        def test_stuck():
            if threading.current_thread().name != "cudagraph-thread-0":
                wait_for_capture()

        def test_next():
            RELEASE.set()
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*cudagraph_thread: 2 of 3 threads still running after 0.5 s",
            "Thread cudagraph-thread-1 (still running), most recent call last:",
            "*in test_stuck",
            "*in wait_for_capture",
        ]
    )


def test_a_thread_that_cannot_start_does_not_deadlock_the_others(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        import threading
        import pytest

        @pytest.fixture
        def second_thread_cannot_start(monkeypatch):
            start = threading.Thread.start

            def failing_start(self):
                if self.name == "cudagraph-thread-1":
                    raise RuntimeError("can't start new thread")
                start(self)

            monkeypatch.setattr(threading.Thread, "start", failing_start)
        """
    )
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_thread(threads=3, timeout=20)
        def test_body(second_thread_cannot_start):
            pass
        """
    )
    result = ourtester.runpytest("--durations=1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: can't start new thread*"])
    result.stdout.no_fnmatch_line("*still running*")


@pytest.mark.parametrize(
    ("marker", "argument"),
    [
        ("cudagraph_thread(threads=0)", "argument 'threads' must be a positive int, got 0"),
        ("cudagraph_thread('2')", "argument 'threads' must be a positive int, got '2'"),
        ("cudagraph_thread(threads=True)", "argument 'threads' must be a positive int, got True"),
        ("cudagraph_thread(timeout=-1)", "argument 'timeout' must be a positive number, got -1"),
        ("cudagraph_thread(timeout='1')", "argument 'timeout' must be a positive number, got '1'"),
        ("cudagraph_thread(tls='eager')", "argument 'tls' must be 'native' or 'init', got 'eager'"),
        ("cudagraph_thread(trees='yes')", "argument 'trees' must be True or False, got 'yes'"),
        ("cudagraph_thread(thread=2)", "unknown argument 'thread' (known: threads, *"),
        (
            "cudagraph_thread(2, 3)",
            "takes only threads as a positional argument, got 3: *e.g. timeout=3",
        ),
    ],
)
def test_bad_marker_arguments_error_that_test_at_setup(
    ourtester: pytest.Pytester, marker: str, argument: str
) -> None:
    ourtester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.{marker}
        def test_body():
            pass

        def test_beside_it():
            pass
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(errors=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_body*",
            f"test_bad.py::test_body: @pytest.mark.cudagraph_thread: {argument}",
        ]
    )


def test_of_several_thread_markers_the_closest_wins(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import threading
        import pytest

        SEEN = {}

        @pytest.mark.cudagraph_thread(threads=3)
        class TestDrafters:
            @pytest.mark.cudagraph_thread(threads=2)
            def test_method(self):
                SEEN.setdefault("method", set()).add(threading.current_thread().name)

        @pytest.mark.cudagraph_thread(threads=4)
        @pytest.mark.cudagraph_thread(threads=2)
        def test_stacked():
            SEEN.setdefault("stacked", set()).add(threading.current_thread().name)

        def test_check():
            assert {name: len(threads) for name, threads in SEEN.items()} == {
                "method": 2, "stacked": 2
            }
        """
    )
    ourtester.runpytest("-p", "no:randomly").assert_outcomes(passed=3)


def test_a_bad_marker_on_a_class_names_each_method(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.cudagraph_thread(tls="sometimes")
        class TestDrafters:
            def test_one(self):
                pass
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["test_bad.py::TestDrafters::test_one: @pytest.mark.cudagraph_thread: *"]
    )


def test_the_marker_is_documented(ourtester: pytest.Pytester) -> None:
    result = ourtester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.cudagraph_thread(threads=1, *, timeout=60.0, trees=True, tls='native', *"]
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
@pytest.mark.parametrize(
    "marker", ["cudagraph_thread", pytest.param("cudagraph_subprocess", marks=pytest.mark.wide)]
)
def test_require_cuda_skips_without_a_device(ourtester: pytest.Pytester, marker: str) -> None:
    """``require_cuda=True`` skips a test of either marker where no CUDA device is visible."""
    ourtester.makepyfile(
        f"""
        import pytest

        @pytest.mark.{marker}(require_cuda=True)
        def test_needs_gpu():
            raise AssertionError("must not run")
        """
    )
    result = ourtester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    # At the test's own line, as a skipif marker's skip: not at the plugin's.
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]1[]] test_require_cuda_skips_without_a_device.py:3: CUDA is not available"]
    )


def test_without_torch_marked_tests_are_skipped(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest('import sys\nsys.modules["torch"] = None\n')
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_thread(threads=2)
        def test_marked():
            raise AssertionError("must not run")
        """
    )
    result = ourtester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]1[]] test_without_torch_marked_tests_are_skipped.py:3: torch is not installed"]
    )


def test_pre_2_13_missing_thread_state_is_named_and_tls_init_fixes_it(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(LEGACY_CONFTEST)
    ourtester.makepyfile(
        """
        import pytest
        import torch._inductor.cudagraph_trees as cgt

        @pytest.mark.cudagraph_thread(threads=2, tls="native")
        def test_native():
            cgt.get_container(0)

        @pytest.mark.cudagraph_thread(threads=2, tls="init")
        def test_init():
            assert cgt.get_container(0).device_index == 0

        def test_main_thread_still_works():
            cgt.get_container(0)
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.fnmatch_lines(
        [
            "*in get_container*",
            "*AssertionError*",
            "*[[]2 of 2 threads: cudagraph-thread-0, cudagraph-thread-1] raised this",
            "*kind: tls-missing",
            "*hint: *ensure_cudagraph_tls()*",
            "*cudagraph_trees.py:*: AssertionError",
        ]
    )


def test_tls_init_serializes_capture_where_torch_does_not(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest(
        LEGACY_CONFTEST
        + '''
import threading
import time

ACTIVE = []
PEAK = [0]
GUARD = threading.Lock()


def fake_record_function(self, *args):
    """Stands in for a real capture, which needs CUDA: records how many run at once."""
    with GUARD:
        ACTIVE.append(1)
        PEAK[0] = max(PEAK[0], len(ACTIVE))
    time.sleep(0.05)
    with GUARD:
        ACTIVE.pop()


@pytest.fixture
def peak_captures(monkeypatch):
    monkeypatch.setattr(cgt.CUDAGraphTreeManager, "record_function", fake_record_function)
    PEAK[0] = 0
    return PEAK
'''
    )
    ourtester.makepyfile(
        """
        import pytest
        import torch._inductor.cudagraph_trees as cgt

        RESULTS = {}

        @pytest.mark.cudagraph_thread(threads=4, tls="init")
        def test_init(peak_captures):
            cgt.CUDAGraphTreeManager.record_function(None)
            RESULTS["init"] = peak_captures[0]

        @pytest.mark.cudagraph_thread(threads=4, tls="native")
        def test_native(peak_captures):
            cgt.CUDAGraphTreeManager.record_function(None)
            RESULTS["native"] = peak_captures[0]

        def test_peaks():
            assert RESULTS["init"] == 1
            assert RESULTS["native"] > 1
            for name in ("__init__", "run_eager", "record_function"):
                assert not hasattr(getattr(cgt.CUDAGraphTreeManager, name), "__wrapped__")
        """
    )
    ourtester.runpytest("-p", "no:randomly").assert_outcomes(passed=3)


FX_RACE_SUITE = """
import threading
import time
import pytest
import torch
import torch.fx

TRACING = threading.Event()
ORIGINAL = torch.fx._symbolic_trace.is_fx_symbolic_tracing


def slow_model(x):
    TRACING.set()
    time.sleep(0.5)  # another thread's compiled call lands while this one traces
    return x + 1


@pytest.mark.cudagraph_thread(threads=2, tls="{tls}")
def test_compile_while_another_thread_traces():
    if threading.current_thread().name == "cudagraph-thread-0":
        torch.fx.symbolic_trace(slow_model)
    else:
        step = torch.compile(lambda x: x * 2, backend="eager")
        assert TRACING.wait(10)
        assert torch.equal(step(torch.ones(2)), torch.full((2,), 2.0))


def test_check_is_whole_again():
    import torch.fx._symbolic_trace as tracing
    assert tracing.is_fx_symbolic_tracing is ORIGINAL
"""


@FX_TRACING_PER_THREAD.skip_where_fixed
def test_one_threads_fx_tracing_fails_anothers_compiled_call_natively(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(FX_RACE_SUITE.format(tls="native"))
    native = ourtester.runpytest()
    native.assert_outcomes(failed=1, passed=1)
    native.stdout.fnmatch_lines(
        [
            "*RuntimeError: Detected that you are using FX to symbolically trace*",
            "*[[]cudagraph-thread-1] raised this",
        ]
    )


def test_tls_init_keeps_one_threads_fx_tracing_from_failing_anothers_compiled_call(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(FX_RACE_SUITE.format(tls="init"))
    ourtester.runpytest().assert_outcomes(passed=2)


def test_threads_failing_alike_show_one_traceback_in_one_screen(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        test_alike="""
        import pytest

        @pytest.mark.cudagraph_thread(threads=8)
        def test_drafters():
            assert 1 + 1 == 3
        """
    )
    result = ourtester.runpytest("-p", "no:warnings")
    result.assert_outcomes(failed=1)
    failure = _failure_section(result.outlines)
    assert len(failure) <= 25, "\n".join(failure)
    assert sum("assert 1 + 1 == 3" in line for line in failure) == 1
    result.stdout.fnmatch_lines(["*[[]8 of 8 threads: cudagraph-thread-0, *7] raised this"])
    assert not any("pytest_cudagraph_guard" in line for line in failure)


def test_threads_failing_differently_show_each_way_once(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        test_ways="""
        import threading
        import pytest

        @pytest.mark.cudagraph_thread(threads=4)
        def test_drafters():
            if threading.current_thread().name.endswith(("0", "1")):
                raise ValueError("bad batch")
            raise KeyError("missing step")
        """
    )
    result = ourtester.runpytest("-p", "no:warnings")
    result.assert_outcomes(failed=1)
    failure = _failure_section(result.outlines)
    assert len(failure) <= 25, "\n".join(failure)
    result.stdout.fnmatch_lines(
        [
            "*ValueError: bad batch",
            "*cudagraph_thread: 4 of 4 threads failed, 2 different ways",
            "*[[]2 of 4 threads: cudagraph-thread-0, cudagraph-thread-1] raised this",
            "*[[]2 of 4 threads: cudagraph-thread-2, cudagraph-thread-3] raised, differently:",
            "*KeyError: 'missing step'",
        ]
    )
    assert not any("pytest_cudagraph_guard" in line for line in failure)


def _failure_section(lines: list[str]) -> list[str]:
    """The lines of the first failure, from its title to the next section."""
    start = next(i for i, line in enumerate(lines) if line.startswith("____"))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("===="))
    return lines[start:end]


def test_threads_failing_alike_through_code_generated_for_each_are_one_failure(
    ourtester: pytest.Pytester,
) -> None:
    """As with torch: each thread runs code compiled for it (its own file) into one assert."""
    ourtester.makepyfile(
        test_generated="""
        import threading
        import pytest

        def shared_check():
            assert False, "no thread state"

        def generated_for_this_thread():
            name = threading.current_thread().name
            namespace = {"shared_check": shared_check}
            source = "def step():\\n    shared_check()\\n"
            exec(compile(source, f"/tmp/generated-{name}.py", "exec"), namespace)
            return namespace["step"]

        @pytest.mark.cudagraph_thread(threads=3)
        def test_drafters():
            generated_for_this_thread()()
        """
    )
    result = ourtester.runpytest("-p", "no:warnings")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*[[]3 of 3 threads: cudagraph-thread-0, *2] raised this"])
    result.stdout.no_fnmatch_line("*differently*")


def test_a_session_without_marked_tests_registers_no_per_test_hooks(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        NAMES = ("cudagraph_guard.threads.calls", "cudagraph_guard.isolation.runs")

        def pytest_sessionfinish(session):
            manager = session.config.pluginmanager
            with open("registered.txt", "w") as out:
                out.write(" ".join(n for n in NAMES if manager.get_plugin(n) is not None))
        """
    )
    registered = ourtester.path / "registered.txt"
    ourtester.makepyfile(test_plain="def test_plain():\n    pass\n")
    ourtester.runpytest().assert_outcomes(passed=1)
    assert registered.read_text() == ""
    ourtester.makepyfile(
        test_marked="import pytest\n\n@pytest.mark.cudagraph_thread\ndef test_marked():\n    pass\n"
    )
    ourtester.runpytest().assert_outcomes(passed=2)
    assert registered.read_text() == "cudagraph_guard.threads.calls"


@pytest.mark.parametrize("tls", ["init", "native"])
def test_each_threads_cudagraph_trees_state_is_released_at_its_end(
    ourtester: pytest.Pytester, tls: str
) -> None:
    if tls == "native" and not hasattr(torch._inductor.cudagraph_trees, "_initialize_tls"):
        pytest.skip("before torch 2.13 a native thread cannot create the state")
    ourtester.makepyfile(
        f"""
        import pytest
        import torch._inductor.cudagraph_trees as cgt

        HELD = []

        @pytest.mark.cudagraph_thread(threads=2, tls="{tls}")
        def test_makes_state():
            containers = cgt.get_obj(cgt.local, "tree_manager_containers")
            containers["left by the test"] = None
            HELD.append(containers)

        def test_released():
            assert HELD == [{{}}, {{}}]
        """
    )
    ourtester.runpytest().assert_outcomes(passed=2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's thread list")
def test_the_test_goes_on_once_its_threads_have_ended_in_the_os(
    ourtester: pytest.Pytester,
) -> None:
    """A thread-local destructor of C (as torch's C++ ones) runs after ``join()`` returns: the
    marked test is over only when it has run and the OS thread is gone."""
    ourtester.makepyfile(
        """
        import ctypes
        import os
        import threading
        import pytest

        LIBC = ctypes.CDLL(None)
        LINGER_US = 300_000
        TIDS = []

        @pytest.mark.cudagraph_thread(threads=2)
        def test_threads_with_a_slow_thread_local_destructor():
            key = ctypes.c_uint()
            usleep = ctypes.cast(LIBC.usleep, ctypes.c_void_p)
            assert LIBC.pthread_key_create(ctypes.byref(key), usleep) == 0
            assert LIBC.pthread_setspecific(key, ctypes.c_void_p(LINGER_US)) == 0
            TIDS.append(threading.get_native_id())

        def test_their_os_threads_are_gone():
            assert len(TIDS) == 2
            assert [t for t in TIDS if os.path.exists(f"/proc/self/task/{t}")] == []
        """
    )
    ourtester.runpytest().assert_outcomes(passed=2)
