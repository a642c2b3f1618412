"""The parent's side of the test processes (:mod:`.pool`, :mod:`.processes`) against a fake zygote
that speaks the wire with nothing loaded (``fake_zygotes``, :data:`.conftest.FAKE_ZYGOTE`): what
the pool sends, how it reads each reply, and how it gives way to fresh interpreters. Each test
takes a fraction of a second; the tests with real zygotes are in test_zygote.py and beside."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cudagraph_guard.isolation import pool, wire
from pytest_cudagraph_guard.isolation.pool import MAX_ZYGOTES, ProcessPool
from pytest_cudagraph_guard.isolation.processes import ChildExit
from pytest_cudagraph_guard.isolation.wire import Learn, ModuleImports, ModuleLists

from ..helpers import all_gone
from .conftest import HELLO, REQUEST, FakeZygotes

pytestmark = pytest.mark.processes  # it starts processes itself: small ones, no torch

MODULES: ModuleLists = {"modules": ["json"], "plugins": [], "started": []}


def _imports(module: str) -> ModuleImports:
    return {"module": module, "names": ["json"], "work": []}


def _request(env: dict[str, str]) -> wire.TestRequest:
    return {**REQUEST, "env": env, "timeout": 30.0}


@pytest.fixture
def process_pool() -> Iterator[ProcessPool]:
    process_pool = ProcessPool(HELLO)
    yield process_pool
    process_pool.close()


def _run(
    process_pool: ProcessPool, env: dict[str, str], learn: Learn | None = None
) -> tuple[ChildExit, Path]:
    folder = process_pool.folder.new_test_folder()
    ended = process_pool.start(_request(env), folder, learn or Learn()).wait(30.0)
    return ended, folder


def _exit_code(ended: ChildExit) -> int | None:
    """The test process's exit code (negative: the signal that ended it); None where lost."""
    return None if ended.status is None else os.waitstatus_to_exitcode(ended.status)


def test_a_test_runs_in_a_process_its_zygote_forked_and_its_exit_code_comes_back(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    env = fake_zygotes.env(runs=["exited 5"])
    ended, folder = _run(process_pool, env)
    assert _exit_code(ended) == 5
    assert not ended.timed_out
    assert not ended.ending
    hello, run = fake_zygotes.frames()
    assert hello["kind"] == "hello"
    assert {key: hello[key] for key in HELLO} == HELLO  # said once, first
    assert run["request"] == str(folder / "request.jsonl")
    assert [found["kind"] for found in run["frames"]] == ["request", "learn"]
    assert process_pool.take_notices() == []


def test_a_zygote_is_sent_the_sessions_modules_as_they_change_and_a_modules_imports_once(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    env = fake_zygotes.env()
    changed: ModuleLists = {**MODULES, "modules": ["json", "csv"]}
    for learn in (
        Learn(MODULES, _imports("test_a.py")),
        Learn(MODULES, _imports("test_a.py")),  # the same: nothing new to it
        Learn(changed, _imports("test_b.py")),
    ):
        _run(process_pool, env, learn)
    learned = [run["frames"][-1] for run in fake_zygotes.frames() if run["kind"] == "run"]
    assert learned[0] == {"kind": "learn", **Learn(MODULES, _imports("test_a.py"))._asdict()}
    assert learned[1] == {"kind": "learn"}
    assert learned[2] == {"kind": "learn", **Learn(changed, _imports("test_b.py"))._asdict()}


def test_a_prestarted_zygote_walks_a_modules_imports_once(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    env = fake_zygotes.env()
    process_pool.prestart(env, _imports("test_a.py"))
    process_pool.prestart(env, _imports("test_a.py"))
    process_pool.prestart(env, _imports("test_b.py"))
    _run(process_pool, env)
    kinds = [(found["kind"], found.get("module")) for found in fake_zygotes.frames()]
    assert kinds == [
        ("hello", None),
        ("walk", "test_a.py"),
        ("walk", "test_b.py"),
        ("run", None),
    ]


def test_a_zygote_that_does_not_start_leaves_each_test_to_a_fresh_interpreter(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    env = fake_zygotes.env(start="fails", spawned=4)
    first, _ = _run(process_pool, env)
    [notice] = process_pool.take_notices()
    # Its pipe ended before it exited: the exit code is waited for.
    assert notice.startswith("cudagraph_subprocess: the zygote did not start (exit code 1;")
    assert "its stderr ends with:\nno torch here" in notice
    assert "each marked test now starts a fresh interpreter" in notice
    second, _ = _run(process_pool, env)
    assert [_exit_code(e) for e in (first, second)] == [4, 4]
    spawned = fake_zygotes.frames()
    assert [found["kind"] for found in spawned] == ["spawned", "spawned"]
    # A fresh interpreter has no zygote to say the session's hello: its request file does.
    assert [found["kind"] for found in spawned[0]["frames"]] == ["hello", "request"]
    assert process_pool.take_notices() == []  # said once


def test_a_zygote_that_never_says_it_is_ready_is_said_still_running(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool, "ZYGOTE_START_TIMEOUT_S", 0.5)
    monkeypatch.setattr(pool, "ZYGOTE_CLOSE_TIMEOUT_S", 0.5)
    ended, _ = _run(process_pool, fake_zygotes.env(start="hangs"))
    assert _exit_code(ended) == 0  # in a fresh interpreter
    [notice] = process_pool.take_notices()
    assert "the zygote did not start (still running; its stderr ends with:" in notice


def test_a_zygote_that_will_not_fork_gives_way_to_fresh_interpreters(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    env = fake_zygotes.env(runs=["nofork the zygote has 2 OS threads"])
    ended, _ = _run(process_pool, env)
    assert _exit_code(ended) == 0
    [notice] = process_pool.take_notices()
    assert "the zygote would not fork: the zygote has 2 OS threads" in notice
    kinds = [found["kind"] for found in fake_zygotes.frames()]
    assert kinds == ["hello", "run", "end", "spawned"]  # the zygote ended before the spawn


def test_a_zygotes_notices_are_told_once(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    _run(process_pool, fake_zygotes.env(notices=["numpy could not be loaded ahead"]))
    assert process_pool.take_notices() == ["numpy could not be loaded ahead"]
    assert process_pool.take_notices() == []


def test_a_late_end_of_an_unknown_process_is_passed_over(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    ended, _ = _run(process_pool, fake_zygotes.env(runs=["late", "exited 2"]))
    assert _exit_code(ended) == 0
    ended, _ = _run(process_pool, fake_zygotes.env())
    assert _exit_code(ended) == 2


def test_a_process_that_said_it_was_done_keeps_its_folder_until_its_end_is_said(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    env = fake_zygotes.env(runs=["done 0", "exited 0"])
    ended, folder = _run(process_pool, env)
    assert ended.ending
    process_pool.folder.release(folder, ended.pid, ending=True)
    assert folder.is_dir()
    _run(process_pool, env)  # its end is said as the next test runs
    assert not folder.exists()


def test_a_test_process_whose_zygote_died_is_lost_and_its_group_killed(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    ended, _ = _run(process_pool, fake_zygotes.env(runs=["lost"]))
    assert ended.status is None
    assert not ended.timed_out
    assert all_gone([ended.pid])


def test_a_session_keeps_at_most_its_number_of_zygotes_ending_the_oldest(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes
) -> None:
    envs = [{**fake_zygotes.env(), "TORCH_FAKE_SET": str(n)} for n in range(MAX_ZYGOTES + 1)]
    for env in envs:
        process_pool.prestart(env)
    _run(process_pool, envs[0])  # the first one's variables: a new zygote, the second one ends
    frames = fake_zygotes.frames()
    assert [found["set"] for found in frames if found["kind"] == "run"] == ["0"]
    assert [found["set"] for found in frames if found["kind"] == "hello"].count("0") == 2
    ended = [found for found in frames if found["kind"] == "end"]
    assert [found["set"] for found in ended] == ["0", "1"]
    assert all_gone([found["pid"] for found in ended])


@pytest.mark.parametrize("wait", [True, False])
def test_closed_zygotes_end_told_or_at_once(
    process_pool: ProcessPool, fake_zygotes: FakeZygotes, wait: bool
) -> None:
    _run(process_pool, fake_zygotes.env())
    process_pool.close_zygotes(wait=wait)
    frames = fake_zygotes.frames()
    assert [found["kind"] for found in frames] == ["hello", "run", *(["end"] if wait else [])]
    assert all_gone([frames[0]["pid"]], timeout=5)
