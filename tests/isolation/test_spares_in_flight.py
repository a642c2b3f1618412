"""A zygote's spares (:class:`.spares.Spares`) with a fake spare in place of a pytest session
(``run_spare``): each is a real fork that logs, to the output its test inherits, what it was
set up as and every frame its zygote sends it. Which spare takes which request, and which go.
Each test takes a fraction of a second; the sessions with real spares are in test_spares.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_cudagraph_guard.isolation import forking
from pytest_cudagraph_guard.isolation import spares as spares_module
from pytest_cudagraph_guard.isolation.forking import RunSpare
from pytest_cudagraph_guard.isolation.spare_wait import _test_of
from pytest_cudagraph_guard.isolation.spares import Spares
from pytest_cudagraph_guard.isolation.wire import (
    REQUEST_NAME,
    STDOUT_NAME,
    ChildRequest,
    FrameReader,
    child_request,
)

from ..helpers import all_gone, wait_for
from .conftest import HELLO, REQUEST

pytestmark = [
    pytest.mark.processes,  # it forks this process: the spares
    # The fork happens beside xdist's thread: the spare only writes and reads its pipes.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


def _fake_spare(request: ChildRequest, assignments: int, done: int) -> None:
    """Notes what it was set up as, then each frame from its zygote until its test's ``run``."""
    os.write(1, f"set up with {request['env']} for {request['nodearg']}\n".encode())
    frames = FrameReader(assignments)
    while (found := frames.next()) is not None:
        os.write(1, (json.dumps(found) + "\n").encode())
        if found["kind"] == "run":
            break
    os._exit(0)


def _dies_at_once(request: ChildRequest, assignments: int, done: int) -> None:
    os._exit(3)


def _request(
    nodearg: str, next_nodearg: str | None = "test_mod.py::test_b", **env: str
) -> ChildRequest:
    """A test's request as its zygote reads it, in a session that keeps two spares."""
    test = {**REQUEST, "env": env, "nodearg": nodearg, "next_nodearg": next_nodearg}
    return child_request({**HELLO, "spares": 2}, test)


@pytest.fixture
def forks_sound() -> None:
    """Never a fork of a process that has initialised CUDA; xdist's threads are no hazard to
    these children, which only write and read their pipes."""
    if forking._cuda_initialised():
        pytest.skip("this process has initialised CUDA: it forks no spare")


@pytest.fixture
def in_session_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forks_sound: None) -> Path:
    """A zygote works in its session's folder, where its spares' folders go."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(spares_module, "fork_hazard", lambda: None)
    return tmp_path


@pytest.fixture
def make_spares(in_session_folder: Path) -> Iterator[Callable[[RunSpare], Spares]]:
    """``make_spares(run_spare)``: a zygote's spares, their processes and folders gone after
    the test; the zygote's pipe to the parent, which a spare closes, made here."""
    read, write = os.pipe()
    made: list[Spares] = []

    def make(run_spare: RunSpare) -> Spares:
        made.append(Spares(write, run_spare))
        return made[-1]

    yield make
    for spares in made:
        spares.discard()
    os.close(read)
    os.close(write)


def _test_folder(session: Path, name: str) -> Path:
    folder = session / f"test-{name}"
    folder.mkdir()
    return folder


def _set_up(spares: Spares) -> list[int]:
    """The pids of the spares waiting, once each has set up (as they have while a test runs:
    one handed a test before it has its output files is not used)."""
    for spare in spares.waiting:
        wait_for(spare.folder / STDOUT_NAME)
    return [spare.process.pid for spare in spares.waiting]


def _output_once_ended(process: forking.TestProcess, folder: Path) -> list[str]:
    os.close(process.done)
    os.waitpid(process.pid, 0)
    return (folder / STDOUT_NAME).read_text().splitlines()


def test_a_spare_takes_the_test_it_was_told_to_expect_its_output_the_tests(
    in_session_folder: Path, make_spares: Callable[[RunSpare], Spares]
) -> None:
    spares = make_spares(_fake_spare)
    request = _request("test_mod.py::test_a", CGG="1")
    spares.fork(request)
    assert len(_set_up(spares)) == 2
    spares.expect("test_mod.py::test_b")
    folder = _test_folder(in_session_folder, "b")
    process = spares.assign(_request("test_mod.py::test_b", CGG="1"), str(folder / REQUEST_NAME))
    assert process is not None
    set_up, expect, run = _output_once_ended(process, folder)
    assert set_up == "set up with {'CGG': '1'} for None"  # it learns its test once given it
    assert json.loads(expect) == {"kind": "expect", "nodearg": "test_mod.py::test_b"}
    assert json.loads(run) == {"kind": "run", "request": str(folder / REQUEST_NAME)}
    assert len(spares.waiting) == 1  # the other waits for the next test
    spare_folders = list(in_session_folder.glob("spare-*"))
    spares.finished(process.pid)
    assert len(list(in_session_folder.glob("spare-*"))) == len(spare_folders) - 1


def test_a_test_of_another_context_gets_no_spare_and_the_spares_go(
    in_session_folder: Path, make_spares: Callable[[RunSpare], Spares]
) -> None:
    spares = make_spares(_fake_spare)
    spares.fork(_request("test_mod.py::test_a", CGG="1"))
    pids = _set_up(spares)
    folder = _test_folder(in_session_folder, "b")
    other = _request("test_mod.py::test_b", CGG="2")  # a marker's env differs
    assert spares.assign(other, str(folder / REQUEST_NAME)) is None
    assert spares.waiting == []
    assert all_gone(pids)
    assert list(in_session_folder.glob("spare-*")) == []
    assert spares.enabled  # the next test of that context gets spares again


def test_a_spare_told_to_expect_another_test_does_not_take_this_one(
    in_session_folder: Path, make_spares: Callable[[RunSpare], Spares]
) -> None:
    spares = make_spares(_fake_spare)
    spares.fork(_request("test_mod.py::test_a"))
    first, second = _set_up(spares)
    spares.expect("test_mod.py::test_b")
    folder = _test_folder(in_session_folder, "c")
    process = spares.assign(_request("test_mod.py::test_c"), str(folder / REQUEST_NAME))
    assert process is not None
    assert process.pid == second
    assert all_gone([first])
    _output_once_ended(process, folder)


def test_a_spare_that_died_unused_turns_the_spares_off(
    in_session_folder: Path, make_spares: Callable[[RunSpare], Spares]
) -> None:
    spares = make_spares(_dies_at_once)
    spares.fork(_request("test_mod.py::test_a"))
    pids = [spare.process.pid for spare in spares.waiting]
    assert all_gone(pids)
    folder = _test_folder(in_session_folder, "b")
    assert spares.assign(_request("test_mod.py::test_b"), str(folder / REQUEST_NAME)) is None
    assert not spares.enabled
    spares.fork(_request("test_mod.py::test_b"))
    assert spares.waiting == []


def test_no_spare_is_set_up_where_the_next_test_is_not_marked(
    in_session_folder: Path, make_spares: Callable[[RunSpare], Spares]
) -> None:
    spares = make_spares(_fake_spare)
    spares.fork(_request("test_mod.py::test_a", next_nodearg=None))
    assert spares.waiting == []


@pytest.mark.usefixtures("forks_sound")
def test_a_spare_sent_no_test_is_not_needed_and_exits_quietly() -> None:
    """The zygote ends (``end``, or its pipe's end read as one) before the spare got a test."""
    pid = os.fork()
    if pid == 0:
        try:
            _test_of({"kind": "end"}, HELLO)
        finally:
            os._exit(7)  # it returned, or raised
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
