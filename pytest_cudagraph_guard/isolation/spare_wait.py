"""A spare test process's wait for its test: what it can do before it knows the test, the wait
itself (warming CUDA's kernels up), and the collecting ahead of the test it is told to expect;
run by ``child.SubprocessChild.pytest_collection`` in a spare (``child.run_spare``)."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Protocol

import pytest

from ..core.session import plugin_session
from .cuda import AHEAD
from .wire import ChildRequest, Frame, FrameReader, SessionHello, expected_of, load_request, run_of


class TestTaker(Protocol):
    """What a spare's wait needs of the test process's plugin (``child.SubprocessChild``)."""

    request: ChildRequest

    def take(self, request: ChildRequest, request_path: Path) -> None: ...

    def select(self, config: pytest.Config, nodearg: str | None) -> None: ...


class SpareWait:
    """A spare's session until its test arrives, around its collection: it does what it can
    before it knows its test, then waits for it, warming CUDA's kernels up; told the test the
    parent runs next, it collects that one meanwhile, and gets only that test."""

    def __init__(self, assignments: int) -> None:
        self.assignments = FrameReader(assignments)
        self.waited_s = 0.0  # for lines from the zygote: not the spare's set-up

    def collect(self, child: TestTaker, config: pytest.Config) -> Generator[None, object, object]:
        """Told the test to expect, waits for it after the collection, whatever that did."""
        try:
            _ready_before_the_test(child.request, config)
            found = self._next_frame()
            expected = expected_of(found)
            if expected is None:
                child.take(*_test_of(found, child.request))
                child.select(config, child.request["nodearg"])
                return (yield)
            child.select(config, expected)
            try:
                return (yield)
            finally:
                child.take(*_test_of(self._next_frame(), child.request))
        finally:
            os.close(self.assignments.fd)

    def _next_frame(self) -> Frame:
        """The next frame from the zygote, warming kernels up until it arrives; an ``end`` one
        at the end of the pipe."""
        started = time.monotonic()
        AHEAD.warm_up_while(lambda: not self.assignments.has_frame())
        found = self.assignments.next() or {"kind": "end"}
        self.waited_s += time.monotonic() - started
        return found


def _ready_before_the_test(request: ChildRequest, config: pytest.Config) -> None:
    """What a spare can do before it knows its test: CUDA's set-up (with the test's environment
    and conftests in effect), the leak guard's baseline (kept where collection changes nothing),
    and a collection of the set-up's garbage (not gc.freeze(): the conftests' objects must stay
    collectable, as in a test process not set up ahead)."""
    if request["init_cuda"]:
        AHEAD.set_up()
    session = plugin_session(config)
    if session is not None and session.take_baseline_early is not None:
        session.take_baseline_early()
    gc.collect()


def _test_of(found: Frame, hello: SessionHello) -> tuple[ChildRequest, Path]:
    """The request of a ``run`` frame and its path, in the session of ``hello``; any other
    frame, the pipe's end: the process is not needed."""
    request_path = run_of(found)
    if request_path is None:
        os._exit(0)
    return load_request(request_path, hello), Path(request_path)
