"""The lines between a session and its zygote, and what a zygote may load: pure functions."""

from __future__ import annotations

import json.decoder  # noqa: F401  # loaded, as a test process would have it
import os
import os.path

import pytest

from pytest_cudagraph_guard.isolation import preloads, protocol


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        (protocol.ready_line(11), protocol.Reply("ready", pid=11)),
        (protocol.started_line(12), protocol.Reply("started", pid=12)),
        (protocol.exited_line(13, 256), protocol.Reply("exited", pid=13, status=256)),
        (protocol.done_line(14, 0), protocol.Reply("done", pid=14, status=0)),
        (
            protocol.notice_line("could not\npreload  x"),
            protocol.Reply("notice", reason="could not preload x"),
        ),
        (
            protocol.nofork_line("the zygote has 2 OS threads"),
            protocol.Reply("nofork", reason="the zygote has 2 OS threads"),
        ),
    ],
)
def test_each_reply_line_reads_back_as_written(line: str, reply: protocol.Reply) -> None:
    assert protocol.parse_reply(line) == reply


@pytest.mark.parametrize("line", ["", "hello", "started", "started x", "exited 1"])
def test_a_line_that_is_no_reply_reads_as_none(line: str) -> None:
    assert protocol.parse_reply(line) is None


def test_a_run_line_carries_its_request_path_spaces_and_all() -> None:
    path = "/tmp/a b/request.pickle"
    assert protocol.parse_run(protocol.run_line(path)) == path
    assert protocol.parse_run("walk /tmp/x") is None


def test_an_expect_line_carries_its_node_argument_and_is_no_run_line() -> None:
    nodearg = "/tmp/a b/test_x.py::test_y[a b::c]"
    line = protocol.expect_line(nodearg)
    assert protocol.parse_expect(line) == nodearg
    assert protocol.parse_run(line) is None
    assert protocol.parse_expect(protocol.run_line(nodearg)) is None


def test_a_test_process_path_adds_the_markers_pythonpath_after_the_first_entry() -> None:
    request: protocol.ChildRequest = {
        "cwd": "/",
        "env": {"PYTHONPATH": os.pathsep.join(["/extra", "/lib", "/extra"])},
        "sys_path": ["", "/lib"],
        "args": [],
        "nodearg": None,
        "trees": True,
        "switches": True,
        "next_nodearg": None,
        "session_modules": preloads.no_modules(),
        "results": None,
        "basetemp": "/tmp",
        "cuda_ahead": True,
        "spares": None,
        "init_cuda": False,
        "timeout": 300.0,
        "live_output": False,
    }
    assert protocol.child_sys_path(request) == ["", "/extra", "/lib"]


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
