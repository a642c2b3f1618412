"""The crash journal and the crash wording on plain data: a line per change of activity, lines a
crash cut short, and a signal learnt from the fault handler's words where no wait status is."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from pytest_cudagraph_guard._torch import events
from pytest_cudagraph_guard.crash.activity_journal import journal_action
from pytest_cudagraph_guard.crash.death import ProcessEnd, crash_error, crash_text, summary
from pytest_cudagraph_guard.crash.journal import (
    NOTHING_READ,
    REPLAYED,
    Action,
    JournalReading,
    JournalWriter,
    read_journal,
)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_a_line_per_change_of_activity_and_the_last_replay_counted_in_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal"
    writer = JournalWriter(path)
    writer.start_test("t.py::test_one", {"TORCHINDUCTOR_X": "1"})
    idents = []

    def drafter() -> None:
        idents.append(threading.get_ident())
        for event in (
            events.Compiled("drafter-1", "inductor", {}, {}, "step"),
            events.CompileEnded("drafter-1", "inductor", "step"),
            *[events.Replayed("drafter-1", function="step")] * 100,
        ):
            action = journal_action(event)
            assert action is not None
            writer.note(action)

    thread = threading.Thread(target=drafter, name="drafter-1")
    thread.start()
    thread.join()
    assert journal_action(events.Skipped("drafter-1", "cpu")) is None
    assert _lines(path)[-1].endswith('"count":         100}')  # rewritten in place
    assert len(_lines(path)) == 4
    writer.start_test("t.py::test_two", {"TORCHINDUCTOR_X": "1"})
    for name in ("step", "other", "step"):
        writer.note(Action(REPLAYED, "drafter-1", name))
    writer.close()
    lines = _lines(path)
    assert len(lines) == 8
    assert '"env"' not in lines[4]  # unchanged since the first test

    one = read_journal(path, "t.py::test_one")
    assert one.last is not None
    assert one.last.phrase() == "after replay 100 of a graph of `step` in thread `drafter-1`"
    assert one.thread_names == {
        threading.get_ident(): threading.current_thread().name,
        idents[0]: "drafter-1",
    }
    two = read_journal(path, "t.py::test_two")
    assert two.last == Action(REPLAYED, "drafter-1", "step", count=2)  # counted per test
    assert two.env == {"TORCHINDUCTOR_X": "1"}
    assert read_journal(path, "t.py::test_three").last is None
    assert read_journal(tmp_path / "none", "t.py::test_one") == NOTHING_READ


def test_a_test_that_never_started_has_the_environment_written_last(tmp_path: Path) -> None:
    """A worker's journal: each test's environment is the last one written up to its start, and
    a test that never started has the last one written of all."""
    path = tmp_path / "journal"
    writer = JournalWriter(path)
    writer.start_test("t.py::test_one", {"TORCHINDUCTOR_X": "1"})
    writer.start_test("t.py::test_two", {"TORCHINDUCTOR_X": "2"})
    writer.start_test("t.py::test_three", {"TORCHINDUCTOR_X": "2"})  # unchanged: not written
    writer.close()
    assert read_journal(path, "t.py::test_one").env == {"TORCHINDUCTOR_X": "1"}
    assert read_journal(path, "t.py::test_three").env == {"TORCHINDUCTOR_X": "2"}
    assert read_journal(path, "t.py::test_never") == JournalReading(
        None, {}, {"TORCHINDUCTOR_X": "2"}
    )
    (tmp_path / "empty").write_text("")
    assert read_journal(tmp_path / "empty", "t.py::test_one") == NOTHING_READ


def test_a_compile_that_ended_is_told_from_one_under_way(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    writer = JournalWriter(path)
    writer.start_test("t.py::test_one", {})
    phrases = []
    for event in (
        events.Compiled("MainThread", "inductor", {}, {}, "step"),
        events.CompileEnded("MainThread", "inductor", "step"),
        events.Compiled("MainThread", "inductor", {}, {}, "loss"),
    ):
        action = journal_action(event)
        assert action is not None
        writer.note(action)
        last = read_journal(path, "t.py::test_one").last
        phrases.append(last.phrase() if last is not None else None)
    writer.close()
    assert phrases == [
        "while compiling `step` (backend inductor) in thread `MainThread`",
        "after compiling `step` (backend inductor) in thread `MainThread`",
        "while compiling `loss` (backend inductor) in thread `MainThread`",
    ]


def test_a_line_cut_by_the_crash_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    writer = JournalWriter(path)
    writer.start_test("t.py::test_one", {})
    action = journal_action(events.Compiled("MainThread", "inductor", {}, {}))
    assert action is not None
    writer.note(action)
    writer.close()
    with path.open("a") as file:
        file.write('{"doing": "repl')
    reading = read_journal(path, "t.py::test_one")
    assert reading.last is not None
    assert reading.last.phrase() == (
        "while compiling a function (backend inductor) in thread `MainThread`"
    )


FAULT = """\
Fatal Python error: Aborted

Current thread 0x00007f0000000001 (most recent call first):
  File "/src/model.py", line 3 in step
"""


def test_the_signal_is_read_from_the_fault_handler_where_no_status_is_known() -> None:
    end = ProcessEnd(None, stderr=FAULT)
    assert end.signal_number() == signal.SIGABRT
    assert summary(end) == "test process died with SIGABRT (signal 6)"
    text = crash_text(end, prefix="worker 'gw0' crashed")
    error = crash_error(end, text, "xdist worker gw0")
    assert error.type == "SIGABRT"
    assert error.thread == "xdist worker gw0"  # no journal names the crashing thread
    assert "line 3 in step" in error.traceback
    assert summary(ProcessEnd(None, lost="test process was lost")) == "test process was lost"
