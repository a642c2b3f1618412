"""Threads that fail alike are one way of failing, whatever addresses, ids or thread names their
messages hold; each thread's record keeps its own message."""

from __future__ import annotations

import pytest

from ..helpers import read_report

SUITE = """
import threading
import pytest

KEPT = []  # alive, so that no two threads' objects share an address


@pytest.mark.cudagraph_thread(threads=2)
def test_drafters():
    output = object()
    KEPT.append(output)
    raise RuntimeError({message})
"""


@pytest.mark.parametrize(
    "message",
    [
        'f"accessing {output!r}, overwritten by a subsequent run"',
        'f"no tree manager for {threading.current_thread()!r}"',
        'f"output id {id(output)} freed in thread {threading.get_ident()}"',
    ],
    ids=["address", "thread", "ids"],
)
def test_failures_that_differ_by_addresses_ids_or_threads_are_one_way(
    ourtester: pytest.Pytester, message: str
) -> None:
    ourtester.makepyfile(test_alike=SUITE.format(message=message))
    result = ourtester.runpytest("-p", "no:warnings", "--cudagraph-report=json:r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*[[]2 of 2 threads: cudagraph-thread-0, cudagraph-thread-1] raised this"]
    )
    result.stdout.no_fnmatch_line("*different ways*")
    (record,) = read_report(ourtester.path / "r.json")["tests"]
    messages = {error["thread"]: error["message"] for error in record["errors"]}
    assert set(messages) == {"cudagraph-thread-0", "cudagraph-thread-1"}
    assert messages["cudagraph-thread-0"] != messages["cudagraph-thread-1"]


def test_failures_that_differ_by_a_value_stay_apart(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        test_apart=SUITE.format(
            message='f"expected 4 items, got {threading.current_thread().name[-1]}"'
        )
    )
    result = ourtester.runpytest("-p", "no:warnings")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cudagraph_thread: 2 of 2 threads failed, 2 different ways"])
