"""The crash journal and the crash wording on plain data: a line per change of activity, lines a
crash cut short, and a signal learnt from the fault handler's words where no wait status is."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from pytest_cudagraph_guard import _torch
from pytest_cudagraph_guard.core.crash import ProcessEnd, crash_error, crash_text, end_summary
from pytest_cudagraph_guard.core.journal import JournalWriter, journal_reading, read_journal
from pytest_cudagraph_guard.report.crash_journal import journal_activity


def test_a_line_per_change_of_activity_not_per_replay(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    writer = JournalWriter(path)
    writer.start_test("t.py::test_one", {"TORCHINDUCTOR_X": "1"})
    for _ in range(100):
        activity = journal_activity(_torch.Replayed("drafter-1", function="step"))
        assert activity is not None
        writer.note(activity)
    assert journal_activity(_torch.Skipped("drafter-1", "cpu")) is None
    writer.start_test("t.py::test_two", {"TORCHINDUCTOR_X": "1"})
    writer.close()
    lines = read_journal(path)
    assert len(lines) == 3
    assert '"env"' not in lines[2]  # unchanged since the first test

    one = journal_reading(lines, "t.py::test_one")
    assert one.last is not None
    assert one.last.phrase() == "replaying a graph of `step` in thread `drafter-1`"
    assert one.thread_names == {threading.get_ident(): threading.current_thread().name}
    two = journal_reading(lines, "t.py::test_two")
    assert two.last is None
    assert two.env == {"TORCHINDUCTOR_X": "1"}
    assert journal_reading(lines, "t.py::test_three").last is None


def test_a_line_cut_by_the_crash_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    writer = JournalWriter(path)
    writer.start_test("t.py::test_one", {})
    activity = journal_activity(_torch.Compiled("MainThread", "inductor", {}, {}))
    assert activity is not None
    writer.note(activity)
    writer.close()
    with path.open("a") as file:
        file.write('{"doing": "repl')
    reading = journal_reading(read_journal(path), "t.py::test_one")
    assert reading.last is not None
    assert reading.last.phrase() == "compiling a function (backend inductor) in thread `MainThread`"


FAULT = """\
Fatal Python error: Aborted

Current thread 0x00007f0000000001 (most recent call first):
  File "/src/model.py", line 3 in step
"""


def test_the_signal_is_read_from_the_fault_handler_where_no_status_is_known() -> None:
    end = ProcessEnd(None, stderr=FAULT)
    assert end.signal_number() == signal.SIGABRT
    summary = end_summary(end)
    assert summary == "test process died with SIGABRT (signal 6)"
    text = crash_text(end, prefix="worker 'gw0' crashed", summary=summary)
    error = crash_error(end, text, "xdist worker gw0")
    assert error["type"] == "SIGABRT"
    assert error["thread"] == "xdist worker gw0"  # no journal names the crashing thread
    assert "line 3 in step" in error["traceback"]
    assert end_summary(ProcessEnd(None, lost="test process was lost")) == "test process was lost"
