"""The marker's threads start on the main thread's CPU and then get its CPUs back (Linux)."""

from __future__ import annotations

import os
import threading

import pytest

from pytest_cudagraph_guard.threads.placement import Placement

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs per-thread CPU affinity and two CPUs",
)


def test_threads_start_on_the_callers_cpu_and_get_its_cpus_back() -> None:
    mine = os.sched_getaffinity(0)
    placement = Placement()
    seen: dict[str, set[int]] = {}

    def started() -> None:
        seen["at start"] = os.sched_getaffinity(0)
        placement.unpin()
        seen["after unpin"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=started)
    placement.pin()
    try:
        seen["caller pinned"] = os.sched_getaffinity(0)
        thread.start()
    finally:
        placement.unpin()
    thread.join()
    assert len(seen["caller pinned"]) == 1
    assert seen["at start"] == seen["caller pinned"]
    assert seen["after unpin"] == mine
    assert os.sched_getaffinity(0) == mine


def test_marked_tests_run_with_the_main_threads_cpus(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import os
        import pytest

        MAIN_CPUS = os.sched_getaffinity(0)

        @pytest.mark.cudagraph_thread(threads=3)
        def test_in_threads():
            assert os.sched_getaffinity(0) == MAIN_CPUS

        def test_main_thread_after():
            assert os.sched_getaffinity(0) == MAIN_CPUS
        """
    )
    ourtester.runpytest().assert_outcomes(passed=2)


def test_a_main_thread_on_fewer_cpus_keeps_them(ourtester: pytest.Pytester) -> None:
    """Where the main thread was given some of the CPUs, its threads get those, and so does it."""
    ourtester.makepyfile(
        """
        import os
        import pytest

        CHOSEN = set(sorted(os.sched_getaffinity(0))[:2])

        @pytest.fixture
        def chosen_cpus():
            everything = os.sched_getaffinity(0)
            os.sched_setaffinity(0, CHOSEN)
            yield CHOSEN
            assert os.sched_getaffinity(0) == CHOSEN
            os.sched_setaffinity(0, everything)

        @pytest.mark.cudagraph_thread
        def test_in_a_thread(chosen_cpus):
            assert os.sched_getaffinity(0) == chosen_cpus
        """
    )
    ourtester.runpytest().assert_outcomes(passed=1)
