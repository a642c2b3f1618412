"""A ``tls="init"`` thread of the marker leaves nothing in torch's C++ thread-local objects for the
OS thread's end to free: before torch 2.13 that end frees them without the GIL, and the process
crashes later in any thread (torch 2.9.1 and 2.11). Real sessions, real threads, real torch."""

from __future__ import annotations

import pytest

# Python clears a thread's ``threading.local`` values after the thread's function has returned
# (after the marker's release): a local's finalizer sees what the OS thread's end will find.
SUITE = """
import threading

import pytest
import torch

FOUND = []
KEYS = ("tree_manager_containers", "tree_manager_locks")
LAST = threading.local()


class LookAtTheEnd:
    def __del__(self):
        FOUND.append([torch._C._get_obj_in_tls(key) if torch._C._is_key_in_tls(key) else None
                      for key in KEYS])


@pytest.mark.cudagraph_thread(threads=2, tls="init")
@pytest.mark.parametrize("case", range({cases}))
def test_drafter(case):
    assert all(torch._C._is_key_in_tls(key) for key in KEYS)
    torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
    LAST.look = LookAtTheEnd()


def test_nothing_was_left():
    assert FOUND == [[None, None]] * (2 * {cases})
"""


def test_what_a_marker_thread_stashed_is_gone_before_its_os_thread_ends(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(SUITE.format(cases=3))
    ourtester.runpytest("-p", "no:randomly").assert_outcomes(passed=4)


def test_many_marker_threads_end_without_a_crash(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(SUITE.format(cases=150))
    result = ourtester.runpytest_subprocess("-p", "no:randomly", timeout=600)
    result.assert_outcomes(passed=151)
