"""When the parent stops waiting for a test process: its test's timeout counts from the test's
start as the process said it, its start and collection have a limit of their own. A stand-in
teller, no process started."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pytest_cudagraph_guard.crash.death import ProcessEnd, summary
from pytest_cudagraph_guard.isolation import processes, wire
from pytest_cudagraph_guard.isolation.processes import BEGAN_POLL_S, STARTING_LIMIT_S, Ended


class StandInTeller:
    """Says no end until the process was stopped (:func:`processes._stop`, stood in for by
    :func:`_stopping`), and then its SIGKILL."""

    def __init__(self, *, alive: bool = True) -> None:
        self.is_alive = alive
        self.stopped = False

    def end_of(self, pid: int, deadline: float) -> Ended | None:
        if self.stopped:
            return Ended(9)
        time.sleep(max(0.0, deadline - time.monotonic()))
        return None

    def alive(self) -> bool:
        return self.is_alive

    def reap(self, pid: int, ended: Ended | None) -> Ended | None:
        return ended


def _process(folder: Path, *, alive: bool = True) -> processes.TestProcess:
    return processes.TestProcess(0, folder, StandInTeller(alive=alive))


def _began(folder: Path, at: float) -> None:
    (folder / wire.RESULTS_NAME).write_bytes(wire.frame("began", at=at))


def test_a_test_that_began_late_has_its_whole_timeout_from_its_start(tmp_path: Path) -> None:
    now = time.monotonic()
    _began(tmp_path, now - 0.5)
    deadline = _process(tmp_path)._deadline(start=now - 10, timeout=2)
    assert deadline == pytest.approx(now + 1.5)


def test_a_test_past_its_timeout_from_its_start_is_past_its_time(tmp_path: Path) -> None:
    now = time.monotonic()
    _began(tmp_path, now - 3)
    assert _process(tmp_path)._deadline(start=now - 10, timeout=2) is None


def test_a_process_not_yet_begun_is_asked_again_within_its_starting_limit(
    tmp_path: Path,
) -> None:
    now = time.monotonic()
    deadline = _process(tmp_path)._deadline(start=now - 5, timeout=1)
    assert deadline is not None
    assert now < deadline <= time.monotonic() + BEGAN_POLL_S


@pytest.mark.parametrize(
    ("timeout", "past"), [(1.0, False), (1.0, True), (500.0, False), (500.0, True)]
)
def test_a_process_that_never_begins_is_stopped_at_its_starting_limit_or_its_longer_timeout(
    tmp_path: Path, timeout: float, past: bool
) -> None:
    now = time.monotonic()
    limit = max(timeout, STARTING_LIMIT_S)
    # Past: beyond the longer of the two; else beyond the starting limit only.
    start = now - limit - 1 if past else now - STARTING_LIMIT_S - (1 if timeout > 200 else -0.5)
    deadline = _process(tmp_path)._deadline(start=start, timeout=timeout)
    if past:
        assert deadline is None
    else:
        assert deadline is not None
        assert deadline <= start + limit


def test_a_process_whose_teller_is_gone_is_waited_for_no_more(tmp_path: Path) -> None:
    now = time.monotonic()
    _began(tmp_path, now)
    assert _process(tmp_path, alive=False)._deadline(start=now, timeout=5) is None


def _stopping(teller: StandInTeller, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop of a hung process, stood in for: this process (whose pid the stand-in process
    has, so that it reads as alive) is not signalled."""

    def stop(pid: int, folder: Path) -> str:
        teller.stopped = True
        return "its stacks"

    monkeypatch.setattr(processes, "_stop", stop)


def test_a_test_that_began_is_stopped_at_its_timeout_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    teller = StandInTeller()
    _stopping(teller, monkeypatch)
    _began(tmp_path, time.monotonic() + 0.3)  # it begins late: its 0.3 s count from there
    ended = processes.TestProcess(os.getpid(), tmp_path, teller).wait(0.3)
    assert ended.timed_out
    assert ended.began
    assert ended.limit == 0.3
    assert ended.duration >= 0.6
    assert ended.stacks == "its stacks"


def test_a_process_that_never_began_its_test_is_stopped_at_its_starting_limit_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    teller = StandInTeller()
    _stopping(teller, monkeypatch)
    monkeypatch.setattr(processes, "STARTING_LIMIT_S", 0.6)
    monkeypatch.setattr(processes, "BEGAN_POLL_S", 0.1)
    ended = processes.TestProcess(os.getpid(), tmp_path, teller).wait(0.2)
    assert ended.timed_out
    assert not ended.began
    assert ended.limit == 0.6
    assert ended.duration >= 0.6
    end = ProcessEnd(ended.status, timed_out=True, timeout=ended.limit, began=ended.began)
    assert summary(end) == (
        "test process did not begin its test within 0.6 s (its start, conftests and "
        "collection) and was killed with its process group"
    )
