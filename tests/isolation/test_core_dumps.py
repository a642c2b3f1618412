"""A test process that crashes where ``ulimit -c`` allows a core: it is a crash with its core
dumped, never a timeout, however long the dump takes (with CUDA's libraries mapped, seconds).
Real processes that really dump core, into the test's own folder."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_cudagraph_guard.isolation.forking import dying, through_dying

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")
DUMPING = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
memory = b"\\x01" * (256 << 20)  # touched, so that the dump takes a while
print("ready", flush=True)
os.abort()
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


def _cores_land_here() -> bool:
    """Whether a crash may dump a core, into its working folder (a pattern without a folder)."""
    try:
        pattern = CORE_PATTERN.read_text().strip()
    except OSError:
        return False
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    return hard == resource.RLIM_INFINITY and not pattern.startswith("|") and "/" not in pattern


pytestmark = pytest.mark.skipif(
    not _cores_land_here(), reason="this machine dumps no core into the crashing process's folder"
)


def _returncode(process: subprocess.Popen[str], deadline: float) -> int | None:
    try:
        return process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None


def test_a_process_still_dumping_its_core_at_the_deadline_is_waited_for(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", DUMPING], cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        giving_up = time.monotonic() + 30
        while not dying(process.pid):
            assert process.poll() is None, "it ended without being seen dumping its core"
            assert time.monotonic() < giving_up
            time.sleep(0.001)
        ended = through_dying(lambda deadline: _returncode(process, deadline), process.pid, 0)
        assert ended == -6
    finally:
        process.kill()
        process.wait()
        for core in tmp_path.glob("core*"):
            core.unlink()
    assert not dying(process.pid)


def test_the_failure_says_the_core_was_dumped(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(ABORTS_WITH_A_CORE)
    try:
        result = ourtester.runpytest()
    finally:
        for core in Path(ourtester.path).glob("core*"):
            core.unlink()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test process died with SIGABRT (signal 6), its core dumped*"])
    assert "timed out" not in result.stdout.str()


def test_a_crash_without_a_core_says_nothing_of_one(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(ABORTS_WITH_A_CORE.replace("resource.RLIM_INFINITY", "0"))
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test process died with SIGABRT (signal 6)"])
    assert "core dumped" not in result.stdout.str()
    assert not list(Path(ourtester.path).glob("core*"))
