"""cudagraph_subprocess forks the next test's process ahead: while a test runs, a spare process
sets up its pytest session, then waits for its test. Real sessions, real processes."""

from __future__ import annotations

import os
import signal
import time

import pytest

from pytest_cudagraph_guard.isolation.forking import Exiting

from ..helpers import alive, all_gone

pytestmark = pytest.mark.processes  # it forks or starts processes itself

# Each process that sets up a session (the parent's included) logs its pid, the marker's
# variable as it saw it then, and whether CUDA graph trees were on.
CONFTEST = """
import os
import sys
import torch._inductor.config as inductor

def pytest_configure(config):
    with open(os.environ["SET_UP"], "a") as log:
        trees = inductor.triton.cudagraph_trees
        log.write(f"{os.getpid()} {os.environ.get('CGG_DEMO')} {trees}\\n")
    print(f"set up in {os.getpid()}", file=sys.stderr)
"""

READ_LOG = """
import os
import signal
import time
import pytest

def set_up():
    lines = open(os.environ["SET_UP"]).read().splitlines()
    return {int(pid): (demo, trees) for pid, demo, trees in map(str.split, lines)}

def dead_or_zombie(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True

def set_up_ahead():  # the process set up while this test runs, noted in the file "ahead"
    known = {next(iter(set_up())), os.getpid()}
    deadline = time.monotonic() + 60
    while not (others := set(set_up()) - known):
        assert time.monotonic() < deadline, "no process was set up ahead"
        time.sleep(0.05)
    [other] = others
    with open("ahead", "w") as file:
        file.write(str(other))
    return other
"""


FIRST_TEST_WAITS = """
@pytest.mark.cudagraph_subprocess
def test_1():
    set_up_ahead()
"""


@pytest.fixture
def spares_tester(ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("SET_UP", str(ourtester.path / "set_up.log"))
    ourtester.makeconftest(CONFTEST)
    return ourtester


def _write_tests(tester: pytest.Pytester, tests: str) -> None:
    tester.makepyfile(READ_LOG + tests)


def _passes_leaving_no_process(tester: pytest.Pytester, tests: int) -> list[int]:
    """Runs the session, in which every test passes, each in a fork (no notice of the plugin);
    then no test process is left. The processes that set up a session, the session's own first."""
    result = tester.runpytest()
    result.assert_outcomes(passed=tests)
    result.stdout.no_fnmatch_line("*CudagraphGuardWarning*")
    lines = (tester.path / "set_up.log").read_text().splitlines()
    processes = [int(line.split()[0]) for line in lines]
    assert all_gone(processes[1:])
    return processes


@pytest.mark.wide
def test_the_next_test_process_is_set_up_while_a_test_runs(
    spares_tester: pytest.Pytester,
) -> None:
    _write_tests(
        spares_tester,
        FIRST_TEST_WAITS
        + """
@pytest.mark.cudagraph_subprocess
def test_2():
    assert os.getpid() == int(open("ahead").read())

def test_unmarked_next():
    pass

@pytest.mark.cudagraph_subprocess
def test_3():
    pass
""",
    )
    processes = _passes_leaving_no_process(spares_tester, tests=4)
    # The session's and one per marked test: none set up during test_2 or test_3, since the
    # test after each is not marked.
    assert len(processes) == 4


@pytest.mark.wide
def test_a_test_whose_marker_differs_gets_a_process_set_up_for_it(
    spares_tester: pytest.Pytester,
) -> None:
    _write_tests(
        spares_tester,
        """
@pytest.mark.cudagraph_subprocess
def test_plain():
    assert "CGG_DEMO" not in os.environ

@pytest.mark.cudagraph_subprocess(env={"CGG_DEMO": "1"})
def test_env():
    assert os.environ["CGG_DEMO"] == "1"
    assert set_up()[os.getpid()] == ("1", "True")

@pytest.mark.cudagraph_subprocess(env={"CGG_DEMO": "1"})
def test_env_again():
    assert set_up()[os.getpid()] == ("1", "True")

@pytest.mark.cudagraph_subprocess(trees=False)
def test_no_trees():
    assert "CGG_DEMO" not in os.environ
    assert set_up()[os.getpid()] == ("None", "False")

@pytest.mark.cudagraph_subprocess
def test_plain_again():
    assert set_up()[os.getpid()] == ("None", "True")
""",
    )
    _passes_leaving_no_process(spares_tester, tests=5)


def test_a_process_that_dies_before_its_test_leaves_the_test_a_fresh_one(
    spares_tester: pytest.Pytester,
) -> None:
    _write_tests(
        spares_tester,
        """
@pytest.mark.cudagraph_subprocess
def test_1():
    ahead = set_up_ahead()
    os.kill(ahead, signal.SIGKILL)
    while dead_or_zombie(ahead) is False:  # died before its test, not at the moment it gets it
        time.sleep(0.01)

@pytest.mark.cudagraph_subprocess
def test_2():
    assert os.getpid() != int(open("ahead").read())
    assert os.getpid() in set_up()

@pytest.mark.cudagraph_subprocess
def test_3():
    assert os.getpid() in set_up()
""",
    )
    _passes_leaving_no_process(spares_tester, tests=3)


@pytest.mark.wide
def test_what_a_process_wrote_while_set_up_ahead_is_its_tests_output(
    spares_tester: pytest.Pytester,
) -> None:
    _write_tests(
        spares_tester,
        FIRST_TEST_WAITS
        + """
@pytest.mark.cudagraph_subprocess
def test_2():
    with open("died", "w") as file:
        file.write(str(os.getpid()))
    os._exit(3)
""",
    )
    result = spares_tester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    died = (spares_tester.path / "died").read_text()
    result.stdout.fnmatch_lines(
        [
            "*cudagraph_subprocess: test process died with exit code 3",
            "last lines of its stderr:",
            f"set up in {died}",
        ]
    )


@pytest.mark.wide
def test_a_process_set_up_ahead_that_hangs_is_stopped_with_its_stacks(
    spares_tester: pytest.Pytester,
) -> None:
    _write_tests(
        spares_tester,
        FIRST_TEST_WAITS
        + """
@pytest.mark.cudagraph_subprocess(timeout=2)
def test_2():
    assert os.getpid() == int(open("ahead").read())
    time.sleep(120)
""",
    )
    result = spares_tester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cudagraph_subprocess: test process timed out after 2 s and was killed with its "
            "process group",
            "its Python stacks when it was stopped:",
            "*in test_2*",
        ]
    )


@pytest.mark.wide
def test_a_spare_guards_from_the_state_its_test_module_left(
    spares_tester: pytest.Pytester,
) -> None:
    """A spare takes the leak guard's baseline while it waits; a module that changes the config
    as it is imported then moves that baseline (no leak), and a test that changes it leaks."""
    spares_tester.makepyfile(
        test_a=READ_LOG
        + """
@pytest.mark.cudagraph_subprocess
def test_1():
    with open("pid_of_1", "w") as file:
        file.write(str(os.getpid()))
    set_up_ahead()
""",
        test_b=READ_LOG
        + """
import torch._inductor.config as inductor

inductor.triton.cudagraph_dynamic_shape_warn_limit = 3

@pytest.mark.cudagraph_subprocess
def test_2():
    assert os.getpid() == int(open("ahead").read())
    assert inductor.triton.cudagraph_dynamic_shape_warn_limit == 3
    known = {next(iter(set_up())), int(open("pid_of_1").read()), os.getpid()}
    deadline = time.monotonic() + 60
    while not (others := set(set_up()) - known):  # the process set up ahead for test_3
        assert time.monotonic() < deadline, "no process was set up ahead"
        time.sleep(0.05)
    [other] = others
    with open("ahead_of_3", "w") as file:
        file.write(str(other))
""",
        test_c="""
import os
import pytest
import torch._inductor.config as inductor

@pytest.mark.cudagraph_subprocess
def test_3():
    assert os.getpid() == int(open("ahead_of_3").read())
    inductor.triton.cudagraph_dynamic_shape_warn_limit = 5
""",
    )
    # In a process of its own: the session imports test_b, which changes the config.
    result = spares_tester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=3, warnings=1)
    result.stdout.fnmatch_lines(["*test_c.py::test_3 leaked 1 config*"])
    result.stdout.no_fnmatch_line("*test_b.py::test_2 leaked*")


# Each test process logs when its test ran, with its tmp_path, and when its session ended,
# whether its tmp_path was still there then (test_1's, after the next test has started); the
# session logs its own end. test_2 waits for test_1's process to end, test_3 for its tmp_path
# to go.
ENDING_CONFTEST = """
import os
import time

import pytest

SESSION = os.environ["SESSION_PID"]
ran = []

def log(line):
    with open(os.environ["ENDINGS"], "a") as file:
        file.write(line + "\\n")

def pytest_configure(config):
    if str(os.getpid()) != SESSION:
        log(f"process {os.getpid()}")

def pytest_runtest_call(item):
    tmp_path = item.funcargs["tmp_path"]  # in a folder of its process's, kept while it lives
    ran.append((item.name, tmp_path / "kept"))
    ran[0][1].write_text("yes")
    log(f"ran {item.name} {os.getpid()} {tmp_path}")

def pytest_sessionfinish(session):
    if str(os.getpid()) == SESSION:
        log("session ended")
    elif ran:
        [(name, kept)] = ran
        time.sleep(3 if name == "test_1" else 0.3)
        log(f"ended {name}, tmp_path {'kept' if kept.exists() else 'gone'}")
"""

ENDING_TESTS = """
import os
import time
import pytest

pytestmark = pytest.mark.cudagraph_subprocess

def ran(name):
    for line in open(os.environ["ENDINGS"]).read().splitlines():
        if line.startswith(f"ran {name} "):
            return line.split()[2:]

def wait_until(done):
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline
        time.sleep(0.05)

def test_1(tmp_path):
    pass

def ended(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True

def test_2(tmp_path):
    pid, _ = ran("test_1")
    wait_until(lambda: ended(pid))

def test_3(tmp_path):
    _, tmp_path_of_1 = ran("test_1")
    wait_until(lambda: not os.path.exists(tmp_path_of_1))  # since test_1's process ended
"""


@pytest.mark.wide
def test_the_next_test_starts_while_a_test_process_ends_its_session(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test process says it is done once its test has finished: the next test runs while it
    ends its session, with its test's folder (its tmp_path) kept until it has ended. The
    session ends after its test processes have ended theirs."""
    endings = ourtester.path / "endings.log"
    monkeypatch.setenv("ENDINGS", str(endings))
    monkeypatch.setenv("SESSION_PID", str(os.getpid()))
    ourtester.makeconftest(ENDING_CONFTEST)
    ourtester.makepyfile(ENDING_TESTS)
    result = ourtester.runpytest("-o", "cudagraph_timeout=60")
    result.assert_outcomes(passed=3)
    lines = [line.split(" /")[0] for line in endings.read_text().splitlines()]
    print("\n".join(lines))
    started = [line for line in lines if line.startswith("ran ")]
    assert lines.index(started[1]) < lines.index("ended test_1, tmp_path kept")
    assert "ended test_3, tmp_path kept" in lines
    assert lines[-1] == "session ended"
    processes = [int(line.split()[1]) for line in lines if line.startswith("process ")]
    assert all_gone(processes)


def _forked(seconds: float) -> int:
    """A child of this process that sleeps, then exits with code 7."""
    pid = os.fork()
    if pid == 0:
        time.sleep(seconds)
        os._exit(7)
    return pid


def test_test_processes_still_ending_end_by_their_deadlines() -> None:
    """What a zygote does with the test processes that said they were done and are still
    ending their sessions: each may end until its deadline, and is killed once past it."""
    exiting = Exiting()
    ends, hangs = _forked(0.2), _forked(600)
    exiting.add(ends, time.monotonic() + 60)
    exiting.add(hangs, time.monotonic() + 1)
    assert exiting.next_deadline() == exiting.deadlines[hangs]
    statuses = dict(exiting.end(wait=True))
    assert os.waitstatus_to_exitcode(statuses[ends]) == 7  # it ended by itself
    assert os.waitstatus_to_exitcode(statuses[hangs]) == -signal.SIGKILL
    assert exiting.deadlines == {}
    for pid in (ends, hangs):
        assert not alive(pid)
        with pytest.raises(ChildProcessError):  # waited for: no zombie is left
            os.waitpid(pid, os.WNOHANG)


def test_an_ending_that_does_not_wait_kills_them_at_once() -> None:
    exiting = Exiting()
    ends_later = _forked(600)
    exiting.add(ends_later, time.monotonic() + 600)
    [(pid, status)] = exiting.end(wait=False)
    assert pid == ends_later
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
