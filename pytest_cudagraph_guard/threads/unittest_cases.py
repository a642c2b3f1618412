"""``unittest.TestCase`` tests in the marker's threads, for :mod:`.plugin`. pytest runs such a
test's ``setUp``, test method and ``tearDown`` together in the call phase; each thread does the same
on its own shallow copy of the test case (so attributes that fixtures set on it are there), and what
unittest records as an error, skip or expected failure is raised in that thread as pytest would
report it."""

from __future__ import annotations

import copy
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import pytest

ExcInfo = tuple[type[BaseException], BaseException, TracebackType]


def is_unittest_case(item: pytest.Item) -> bool:
    """By its class, which pytest knows from collection on (before 8.2 it makes the instance
    only at the test's setup)."""
    cls = getattr(item, "cls", None)
    return isinstance(cls, type) and issubclass(cls, unittest.TestCase)


@contextmanager
def unittest_case_in_threads(
    item: pytest.Item, run: Callable[[Callable[[], Any]], None]
) -> Iterator[None]:
    """For the duration of the call phase, makes ``item.runtest`` run the case in threads."""
    case = getattr(item, "instance")  # noqa: B009 (typed as object on pytest.Item)

    def runtest() -> None:
        __tracebackhide__ = True
        run(lambda: run_case(copy.copy(case)))

    item.runtest = runtest  # type: ignore[method-assign]
    try:
        yield
    finally:
        del item.runtest


def run_case(case: unittest.TestCase) -> None:
    """Runs ``case`` and raises its first error, or its skip or expected failure as pytest's."""
    __tracebackhide__ = True
    result = _ThreadResult()
    case.run(result)
    if result.raised is not None:
        raise result.raised
    if result.outcome is not None:
        raise result.outcome


class _ThreadResult(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.raised: BaseException | None = None
        self.outcome: BaseException | None = None

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        self._keep(err)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._keep(err)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        self.outcome = self.outcome or pytest.skip.Exception(reason, _use_item_location=True)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        self.outcome = self.outcome or pytest.xfail.Exception("expected failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self.outcome = self.outcome or pytest.fail.Exception("Unexpected success", pytrace=False)

    def _keep(self, err: ExcInfo) -> None:
        if self.raised is None:
            self.raised = err[1]
