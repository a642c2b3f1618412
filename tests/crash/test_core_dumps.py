"""A test process that died before its timeout but is still on its way out is a crash, never a
timeout: one writing its core dump where ``ulimit -c`` allows it (seconds with CUDA's libraries
mapped), one ended and not yet reaped; one with a thread still running is alive. Real processes;
the core-dump tests really dump, into the test's own folder, and skip on a machine whose cores
go elsewhere (a ``core_pattern`` that pipes them to a handler, or names a folder)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_cudagraph_guard.crash.death import CORE_DUMPED
from pytest_cudagraph_guard.crash.exit_state import CORE_DUMPING, exit_state, through_dying

pytestmark = pytest.mark.processes  # it forks or starts processes itself

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")
DUMPING = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
memory = b"\\x01" * (256 << 20)  # touched, so that the dump takes a while
print("ready", flush=True)
os.abort()
"""
MAIN_THREAD_ENDS = """
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(60,)).start()
print("ready", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""
ABORTS_WITH_A_CORE = """
import os
import resource

import pytest


@pytest.mark.cudagraph_subprocess
def test_aborts_with_a_core():
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    os.abort()
"""
# It aborts 0.4 s before its timeout, and its dump (512 MB touched) takes longer than that; on a
# machine too loaded to get there in time, it skips.
ABORTS_AT_ITS_TIMEOUT = """
import os
import resource
import time

import pytest


def age():
    ticks = int(open("/proc/self/stat").read().rpartition(")")[2].split()[19])
    uptime = float(open("/proc/uptime").read().split()[0])
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


@pytest.mark.cudagraph_subprocess(timeout=4)
def test_aborts_as_its_timeout_nears():
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    memory = b"\\x01" * (512 << 20)
    if age() > 3.3:
        pytest.skip("too loaded to abort before the timeout")
    time.sleep(max(0.0, 3.6 - age()))
    os.abort()
"""


def _cores_land_here() -> bool:
    """Whether a crash may dump a core, into its working folder (a pattern without a folder)."""
    try:
        pattern = CORE_PATTERN.read_text().strip()
    except OSError:
        return False
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    return hard == resource.RLIM_INFINITY and not pattern.startswith("|") and "/" not in pattern


dumps_cores = pytest.mark.skipif(
    not _cores_land_here(), reason="this machine dumps no core into the crashing process's folder"
)
linux = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")


def _started(script: str, folder: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", script], cwd=folder, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    return process


def _until(condition: Callable[[], bool]) -> None:
    giving_up = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < giving_up
        time.sleep(0.001)


@dataclass
class _Waited:
    """A process whose end is its return code, and each answer it gave."""

    process: subprocess.Popen[str]
    answers: list[int | None] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def end_by(self, deadline: float) -> int | None:
        try:
            answer = self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            answer = None
        self.answers.append(answer)
        return answer


def _state_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


@dumps_cores
def test_a_process_dumping_its_core_at_the_deadline_is_waited_for(tmp_path: Path) -> None:
    process = _started(DUMPING, tmp_path)
    waited = _Waited(process)
    try:
        _until(lambda: CORE_DUMPING in Path(f"/proc/{process.pid}/status").read_text())
        assert exit_state(process.pid) == "dying"
        assert through_dying(waited, 0) == -6
        assert waited.answers[0] is None  # the deadline had passed: it was waited for as it dumped
    finally:
        process.kill()
        process.wait()
        for core in tmp_path.glob("core*"):
            core.unlink()


@linux
def test_ended_and_unreaped_is_dying_and_reaped_is_gone(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"], cwd=tmp_path)
    _until(lambda: _state_line(process.pid) == "Z")
    assert exit_state(process.pid) == "dying"
    pid = process.pid
    assert process.wait() == 0
    assert exit_state(pid) == "gone"


@linux
def test_a_process_whose_main_thread_ended_is_alive_and_times_out(tmp_path: Path) -> None:
    process = _started(MAIN_THREAD_ENDS, tmp_path)
    try:
        _until(lambda: _state_line(process.pid) == "Z")  # its main thread, the process's entry
        assert exit_state(process.pid) == "alive"
        start = time.monotonic()
        assert through_dying(_Waited(process), start + 0.2) is None
        assert time.monotonic() - start < 2
    finally:
        process.kill()
        process.wait()


def _crashed_with_a_core(ourtester: pytest.Pytester, source: str) -> str:
    """The output of a session of ``source``'s one test, which dies with its core dumped."""
    ourtester.makepyfile(source)
    try:
        result = ourtester.runpytest("-rs")
    finally:
        for core in Path(ourtester.path).glob("core*"):
            core.unlink()
    if result.parseoutcomes().get("skipped"):
        pytest.skip("the machine was too loaded for the test process to abort in time")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["cudagraph_subprocess: test process died with SIGABRT (signal 6)", CORE_DUMPED]
    )
    return result.stdout.str()


@dumps_cores
@pytest.mark.wide
def test_a_core_dump_that_outlasts_the_timeout_is_the_crash(ourtester: pytest.Pytester) -> None:
    assert "timed out" not in _crashed_with_a_core(ourtester, ABORTS_AT_ITS_TIMEOUT)


@dumps_cores
def test_the_failure_says_the_core_was_dumped(ourtester: pytest.Pytester) -> None:
    assert "Fatal Python error: Aborted" in _crashed_with_a_core(ourtester, ABORTS_WITH_A_CORE)


@pytest.mark.wide
def test_a_crash_without_a_core_says_nothing_of_one(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(ABORTS_WITH_A_CORE.replace("resource.RLIM_INFINITY", "0"))
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["cudagraph_subprocess: test process died with SIGABRT (signal 6)"])
    assert CORE_DUMPED not in result.stdout.str()
    assert not list(Path(ourtester.path).glob("core*"))
