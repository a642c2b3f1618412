"""The frames between a session, its zygotes and their test processes, and what a zygote may
load: pure functions and pipes of this process, no process started."""

from __future__ import annotations

import contextlib
import json.decoder  # noqa: F401  # loaded, as a test process would have it
import os
import os.path
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cudagraph_guard.isolation import preloads, wire

from .conftest import HELLO, REQUEST


@pytest.fixture
def pipe() -> Iterator[tuple[wire.FrameReader, int]]:
    """A reader of frames on a pipe of this process, and the pipe's other end."""
    read, write = os.pipe()
    yield wire.FrameReader(read), write
    for fd in (read, write):
        with contextlib.suppress(OSError):  # a test may have closed it
            os.close(fd)


@pytest.mark.parametrize(
    ("sent", "reply"),
    [
        (wire.frame("ready", pid=11), wire.Reply("ready", pid=11)),
        (wire.frame("started", pid=12), wire.Reply("started", pid=12)),
        (wire.frame("exited", pid=13, status=256), wire.Reply("exited", pid=13, status=256)),
        (wire.frame("done", pid=14, status=0), wire.Reply("done", pid=14, status=0)),
        (
            wire.frame("notice", reason="could not\npreload  x"),
            wire.Reply("notice", reason="could not\npreload  x"),
        ),
        (
            wire.frame("nofork", reason="the zygote has 2 OS threads"),
            wire.Reply("nofork", reason="the zygote has 2 OS threads"),
        ),
    ],
)
def test_each_reply_reads_back_as_sent_on_one_line(sent: bytes, reply: wire.Reply) -> None:
    assert sent.count(b"\n") == 1
    assert sent.endswith(b"\n")
    assert wire.Reply.of(wire.decode(sent)) == reply


@pytest.mark.parametrize("line", ["", "hello", "started 12", "[1, 2]", '{"pid": 1}', '{"kind": 3}'])
def test_a_line_that_is_no_frame_reads_as_unreadable_with_its_text(line: str) -> None:
    found = wire.decode(line)
    assert found == {"kind": "unreadable", "text": line}
    assert wire.Reply.of(found) == wire.Reply("unreadable", reason=line)


def test_a_value_json_has_no_form_for_is_sent_as_its_repr() -> None:
    found = wire.decode(wire.frame("warning", warning={"message": Path("/x")}))
    assert found == {"kind": "warning", "warning": {"message": repr(Path("/x"))}}


def test_a_run_frame_carries_its_request_path_spaces_and_all() -> None:
    path = "/tmp/a b/request.jsonl"
    assert wire.run_of(wire.decode(wire.run_frame(path))) == path
    assert wire.run_of(wire.decode(wire.frame("expect", nodearg=path))) is None


def test_a_walk_frame_carries_a_test_module_s_imports_and_nothing_else_is_one() -> None:
    imports: wire.ModuleImports = {
        "module": "/a b/test_x.py",
        "names": ["x", "x.y"],
        "work": ["isa"],
    }
    assert wire.walk_of(wire.decode(wire.walk_frame(imports))) == imports
    assert wire.walk_of(wire.decode(wire.run_frame("/a b/request.jsonl"))) is None


def test_a_zygotes_request_file_carries_only_what_is_new_to_learn(tmp_path: Path) -> None:
    request_path = tmp_path / "request.jsonl"
    imports: wire.ModuleImports = {"module": "/t/test_a.py", "names": ["numpy"], "work": []}
    for learn in (wire.Learn(), wire.Learn(preloads.no_modules(), imports)):
        wire.write_request(request_path, REQUEST, learn=learn)
        assert wire.load_learn(request_path) == learn
        assert wire.load_request(request_path, HELLO) == {**HELLO, **REQUEST}
    assert wire.read_frames(request_path)[1]["module_imports"] == imports
    wire.write_request(request_path, REQUEST, learn=wire.Learn())
    assert wire.read_frames(request_path)[1] == {"kind": "learn"}  # nothing new: nothing sent


def test_an_expect_frame_carries_its_node_argument_and_is_no_run() -> None:
    nodearg = "/tmp/a b/test_x.py::test_y[a b::c]"
    found = wire.decode(wire.frame("expect", nodearg=nodearg))
    assert wire.expected_of(found) == nodearg
    assert wire.run_of(found) is None
    assert wire.expected_of(wire.decode(wire.run_frame(nodearg))) is None


def test_frames_written_in_pieces_are_read_whole_and_in_order(
    pipe: tuple[wire.FrameReader, int],
) -> None:
    reader, write = pipe
    sent = wire.frame("started", pid=1) + wire.frame("notice", reason="x" * 10_000)
    for start in range(0, len(sent), 4096):
        os.write(write, sent[start : start + 4096])
    assert reader.has_frame()
    assert reader.next(time.monotonic() + 5) == {"kind": "started", "pid": 1}
    assert reader.next(time.monotonic() + 5) == {"kind": "notice", "reason": "x" * 10_000}


def test_a_reader_gives_none_at_its_deadline_and_at_the_pipes_end(
    pipe: tuple[wire.FrameReader, int],
) -> None:
    reader, write = pipe
    os.write(write, b'{"kind": "rea')  # half a frame: not one yet
    before = time.monotonic()
    assert reader.next(time.monotonic() + 0.1) is None
    assert time.monotonic() - before >= 0.1
    os.write(write, b'dy", "pid": 2}\n')
    assert reader.next(time.monotonic() + 5) == {"kind": "ready", "pid": 2}
    os.close(write)
    assert reader.next() is None


def test_a_file_of_frames_reads_back_less_a_frame_its_writer_did_not_finish(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results.jsonl"
    wire.write_frames(results, [wire.frame("collect_error", collect_error="a\nb")])
    with results.open("ab") as file:
        file.write(wire.frame("report", report={"when": "call"})[:-9])  # it died writing
    assert wire.read_frames(results) == [{"kind": "collect_error", "collect_error": "a\nb"}]
    assert oct(results.stat().st_mode & 0o777) == oct(0o600)


def test_a_spawned_interpreters_request_holds_its_hello_a_zygotes_needs_the_zygotes(
    tmp_path: Path,
) -> None:
    request_path = tmp_path / "request.jsonl"
    wire.write_request(request_path, REQUEST, hello=HELLO)
    assert wire.load_request(request_path) == {**HELLO, **REQUEST}
    wire.write_request(request_path, REQUEST)
    with pytest.raises(ValueError, match="no whole request"):
        wire.load_request(request_path)
    assert wire.load_request(request_path, HELLO) == {**HELLO, **REQUEST}
    wire.write_frames(request_path, [wire.frame("hello", **HELLO)])
    with pytest.raises(ValueError, match="no whole request"):
        wire.load_request(request_path, HELLO)


def test_a_test_process_path_adds_the_markers_pythonpath_after_the_first_entry() -> None:
    request = wire.child_request(HELLO, REQUEST)
    assert wire.child_sys_path(request) == ["", "/extra", "/lib"]


def test_a_zygote_may_load_the_plugins_modules_but_not_the_parents_own() -> None:
    names = [
        "_pytest.python",
        "pytest_cudagraph_guard.plugin",
        "pytest_cudagraph_guard.isolation.child",
        "pytest_cudagraph_guard.isolation.runner",
        "pytest_cudagraph_guard.isolation.pool",
        "pytest_cudagraph_guard.isolation.__main__",
        "__main__",
        "numpy",
    ]
    lists = preloads.modules_for_a_zygote(names, plugins=["pytest_cudagraph_guard.isolation.pool"])
    assert lists == {
        "modules": [
            "_pytest.python",
            "pytest_cudagraph_guard.isolation.child",
            "pytest_cudagraph_guard.plugin",
        ],
        "plugins": [],
        "started": [],
    }


def test_a_zygote_may_try_the_installed_modules_a_test_process_imported_outside_its_test() -> None:
    """Of what a test process's session imported as it started or ended: the installed modules,
    in the order loaded, not the project's own (its conftests, its test modules), not what
    another list has, not a module loaded under another name."""
    names = [
        "json",
        __name__,  # this test module: the project's own
        "json.decoder",
        "_pytest.python",  # trusted: in "modules"
        "pluggy",
        "os.path",  # posixpath's, under another name
        "sys",  # built in
        "not.loaded",
    ]
    lists = preloads.modules_for_a_zygote(names, plugins=["pluggy"], outside_test=names)
    assert lists["started"] == ["json", "json.decoder", "sys"]
    assert lists["plugins"] == ["pluggy"]
    assert lists["modules"] == ["_pytest.python"]


def test_a_tests_start_is_read_from_its_results_and_is_none_before_it_began(
    tmp_path: Path,
) -> None:
    results = tmp_path / wire.RESULTS_NAME
    assert wire.began_at(results) is None  # no file yet
    results.write_bytes(wire.frame("warning", warning={}))
    assert wire.began_at(results) is None
    assert wire.time_ends(results, 3.0) is None  # a timeout never counts from before it began
    with results.open("ab") as file:
        file.write(wire.frame("began", at=12.5) + wire.frame("report", report={}))
    assert wire.began_at(results) == 12.5
    assert wire.time_ends(results, 3.0) == 15.5
