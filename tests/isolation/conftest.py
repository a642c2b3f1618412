"""What the tests of test processes share: the stand-in for CUDA that their sessions initialise on
a machine without a GPU, the logs its processes and their tests write, how an inner test tells
that a zygote forked its process, and a fake zygote for the tests of the parent's side."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_cudagraph_guard.isolation import pool, wire
from pytest_cudagraph_guard.isolation.cuda import STANDIN_VARIABLE

# A session's hello and a test's request, for the tests of the wire and of either side of it.
HELLO: wire.SessionHello = {
    "cwd": "/",
    "args": ["-q"],
    "cuda_ahead": True,
    "spares": None,
    "live_output": False,
}
REQUEST: wire.TestRequest = {
    "env": {"PYTHONPATH": os.pathsep.join(["/extra", "/lib", "/extra"])},
    "sys_path": ["", "/lib"],
    "nodearg": "/tmp/a b/test_x.py::test_y",
    "trees": True,
    "switches": True,
    "next_nodearg": None,
    "results": "/tmp/a b/results.jsonl",
    "basetemp": "/tmp",
    "init_cuda": False,
    "timeout": 300.0,
}

# The stand-in for CUDA (``PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN``): importing it is initialising
# CUDA, through the same code path as ``torch.cuda.init``. Each process that imports it logs its
# pid to $INITS, with the variables named in $INITS_SHOWN as it sees them; each step of its
# kernels' warm-up (``WARM_UP_STEPS``) logs its process and name to $STEPS as it starts, then
# takes its time.
STANDIN = """
import os
import time

with open(os.environ["INITS"], "a") as log:
    shown = [str(os.environ.get(name)) for name in os.environ["INITS_SHOWN"].split()]
    log.write(" ".join([str(os.getpid()), *shown]) + "\\n")

def _step(name, seconds=0.0, fails=False):
    def run():
        with open(os.environ["STEPS"], "a") as log:
            log.write(f"{{os.getpid()}} {{name}}\\n")
        time.sleep(seconds)
        if fails:
            raise RuntimeError("no such kernel")
    return (name, run)

WARM_UP_STEPS = [{steps}]
"""
# The logs, in the tester's folder, named by the variables that give their paths: $RAN is the
# inner tests' own, where they note their processes.
LOGS = {"INITS": "inits.log", "STEPS": "steps.log", "RAN": "ran.log"}

FakeCuda = Callable[..., pytest.Pytester]


@pytest.fixture
def fake_cuda(ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """``fake_cuda(*shown, steps="")``: ``ourtester``, whose sessions have the stand-in for CUDA,
    its processes logging the variables ``shown``, its warm-up running ``steps`` (``_step(...)``
    calls)."""

    def install(*shown: str, steps: str = "") -> pytest.Pytester:
        site = ourtester.path / "site"
        site.mkdir(exist_ok=True)
        (site / "fake_cuda.py").write_text(STANDIN.format(steps=steps))
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv(STANDIN_VARIABLE, "fake_cuda")
        monkeypatch.setenv("INITS_SHOWN", " ".join(shown))
        for variable, name in LOGS.items():
            monkeypatch.setenv(variable, str(ourtester.path / name))
        return ourtester

    return install


def logged(tester: pytest.Pytester, name: str) -> list[list[str]]:
    """The lines of the log ``name`` in ``tester``'s folder, each split into its words."""
    return [line.split() for line in (tester.path / name).read_text().splitlines()]


# For an inner test module that imports os: whether the test's process was forked by a zygote
# (its parent runs ``python -m pytest_cudagraph_guard.isolation serve``); false where the test
# ran in the session's own process, or in one the session spawned.
FORKED_BY_A_ZYGOTE = """
def forked_by_a_zygote():
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
        command = cmdline.read().split(b"\\0")
    return command[-3:-1] == [b"pytest_cudagraph_guard.isolation", b"serve"]
"""


# A stand-in for the zygote, for the tests of the parent's side (:mod:`.pool`, :mod:`.processes`)
# with nothing loaded: it speaks the wire in the real one's order (``serve``), and stands in for
# a spawned test process too (``run REQUEST``). What it replies to each ``run`` is a word of its
# script ($FAKE_ZYGOTE, JSON): ``exited CODE`` (its test process ended), ``done CODE`` (it said it
# was done: its ``exited`` comes after the next test's ``started``), ``late`` (an unknown
# process's ``exited`` first, as of a test the parent stopped waiting for, then ``exited 0``),
# ``nofork REASON``, or ``lost`` (its test process sleeps, and the zygote dies without a word).
# ``"start"``: ``fails`` makes it end its pipe and die before it is ready, ``hangs`` never ready;
# ``"notices"`` are said first. It logs each frame it gets, with its pid and the frames of a
# ``run``'s request file, to $FAKE_ZYGOTE_LOG.
FAKE_ZYGOTE = """
import json
import os
import sys
import time

from pytest_cudagraph_guard.isolation.wire import FrameReader, read_frames, run_of, send

SCRIPT = json.loads(os.environ.get("FAKE_ZYGOTE", "{}"))


def note(found, **more):
    with open(os.environ["FAKE_ZYGOTE_LOG"], "a") as log:
        mine = {"pid": os.getpid(), "set": os.environ.get("TORCH_FAKE_SET")}
        log.write(json.dumps({**mine, **found, **more}) + "\\n")


# A child in a group of its own by the time it is said started, none of whose descriptors is a
# pipe of the zygote's, as a real test process.
def test_process(replies, code, seconds=0.0):
    grouped, says_grouped = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(devnull, fd)
        for fd in (replies, grouped, says_grouped):
            os.close(fd)
        time.sleep(seconds)
        os._exit(code)
    os.close(says_grouped)
    os.read(grouped, 1)  # its end of the pipe closed: it has its group
    os.close(grouped)
    return pid


def serve():
    if SCRIPT.get("start") == "fails":
        print("no torch here", file=sys.stderr, flush=True)
        os.close(1)  # its pipe ends before it exits
        time.sleep(0.3)
        sys.exit(1)
    if SCRIPT.get("start") == "hangs":
        while os.read(0, 4096):  # until the parent ends it
            pass
        sys.exit(0)
    replies = os.dup(1)
    os.dup2(2, 1)
    send(replies, "ready", pid=os.getpid())
    for reason in SCRIPT.get("notices", []):
        send(replies, "notice", reason=reason)
    requests = FrameReader(0)
    runs = iter(SCRIPT.get("runs", []))
    ending = []
    while (found := requests.next()) is not None:
        path = run_of(found)
        note(found, frames=read_frames(path) if path else None)
        if found["kind"] == "end":
            break
        if path is None:
            continue
        how, _, said = next(runs, "exited 0").partition(" ")
        if how == "nofork":
            send(replies, "nofork", reason=said)
            continue
        if how == "late":
            send(replies, "exited", pid=1, status=0)
        pid = test_process(replies, int(said or 0), 60 if how == "lost" else 0)
        send(replies, "started", pid=pid)
        if how == "lost":
            os._exit(0)
        for ended, status in ending:  # reaped once the next test has started
            send(replies, "exited", pid=ended, status=status)
        ending.clear()
        _, status = os.waitpid(pid, 0)
        send(replies, "done" if how == "done" else "exited", pid=pid, status=status)
        if how == "done":
            ending.append((pid, status))


if sys.argv[1] == "serve":
    serve()
else:
    note({"kind": "spawned"}, frames=read_frames(sys.argv[2]))
    sys.exit(SCRIPT.get("spawned", 0))
"""


class FakeZygotes:
    """The fake zygote's environment for a pool's requests, and what its processes logged."""

    def __init__(self, folder: Path) -> None:
        (folder / "fake_zygote.py").write_text(FAKE_ZYGOTE)
        self.log = folder / "fake-zygote.log"
        self.base = {"PYTHONPATH": str(folder), "FAKE_ZYGOTE_LOG": str(self.log)}

    def env(self, **script: object) -> dict[str, str]:
        return {**os.environ, **self.base, "FAKE_ZYGOTE": json.dumps(script)}

    def frames(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def fake_zygotes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeZygotes:
    """Pools whose zygotes and spawned test processes are the fake (:data:`FAKE_ZYGOTE`)."""
    monkeypatch.setattr(pool, "ENTRY_MODULE", "fake_zygote")
    folder = tmp_path / "fake-site"
    folder.mkdir()
    return FakeZygotes(folder)
