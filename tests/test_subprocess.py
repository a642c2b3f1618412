"""@pytest.mark.cudagraph_subprocess in real pytest sessions: a real zygote, real test processes,
real crashes and hangs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from pytest_cudagraph_guard._torch import settings_can_wait_for_import

from .procfs import all_gone, wait_for


def test_the_whole_test_runs_in_a_fresh_process_set_up_as_the_parent(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        import os
        import pytest

        def pytest_addoption(parser):
            parser.addoption("--flavour")

        @pytest.fixture(scope="module")
        def module_pid():
            return os.getpid()

        @pytest.fixture
        def pid():
            return os.getpid()
        """
    )
    ourtester.makepyfile(
        """
        import os
        import pytest
        import torch._inductor.config as inductor

        PARENT = []

        def test_in_parent(module_pid):
            PARENT.append(module_pid)
            os.environ["PARENT_PID"] = str(module_pid)

        @pytest.mark.cudagraph_subprocess(env={"EXTRA": "1"})
        def test_function(pid, module_pid, request):
            assert pid == module_pid == os.getpid() != int(os.environ["PARENT_PID"])
            assert os.environ["EXTRA"] == "1"
            assert request.config.getoption("flavour") == "mint"
            assert inductor.triton.cudagraphs is True
            assert inductor.triton.cudagraph_trees is True

        class TestBox:
            @pytest.mark.cudagraph_subprocess(trees=False)
            def test_method(self, pid):
                assert pid != int(os.environ["PARENT_PID"])
                assert inductor.triton.cudagraphs is True
                assert inductor.triton.cudagraph_trees is False

        @pytest.mark.parametrize(
            "value", [1, pytest.param(2, marks=pytest.mark.cudagraph_subprocess)], ids=["a", "b-2"]
        )
        def test_parametrized(value, pid):
            in_child = pid != int(os.environ["PARENT_PID"])
            assert in_child == (value == 2)

        def test_parent_untouched(module_pid):
            assert module_pid == PARENT[0] == os.getpid()
            assert "EXTRA" not in os.environ
            assert inductor.triton.cudagraphs is False
        """
    )
    result = ourtester.runpytest("--flavour=mint", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        ["*::TestBox::test_method PASSED*", "*test_parametrized?b-2? PASSED*"]
    )


def test_reports_are_the_childs_outcomes_output_and_properties(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import logging
        import sys
        import time
        import warnings
        import pytest

        pytestmark = pytest.mark.cudagraph_subprocess

        def test_fails(record_property):
            print("stdout-marker")
            sys.stderr.write("stderr-marker\\n")
            logging.getLogger("child").warning("log-marker")
            record_property("answer", 42)
            warnings.warn(UserWarning("warning-marker"))
            assert [1, 2] == [1, 3]

        def test_skips():
            pytest.skip("skip-marker")

        @pytest.mark.xfail(reason="xfail-marker")
        def test_xfails():
            assert False

        @pytest.mark.xfail(reason="xpass-marker")
        def test_xpasses():
            pass

        @pytest.mark.xfail(strict=True)
        def test_xpasses_strictly():
            pass

        def test_passes_slowly():
            time.sleep(0.3)
        """
    )
    result = ourtester.runpytest("-rA", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, failed=2, skipped=1, xfailed=1, xpassed=1)
    result.stdout.fnmatch_lines(
        [
            "*def test_fails(record_property):*",
            ">       assert [1, 2] == [1, 3]",
            "E*At index 1 diff: 2 != 3",
            "*Captured stdout call*",
            "stdout-marker",
            "*Captured stderr call*",
            "stderr-marker",
            "*Captured log call*",
            "*log-marker*",
        ]
    )
    result.stdout.fnmatch_lines(["*warnings summary*", "*UserWarning: warning-marker*"])
    result.stdout.fnmatch_lines(["SKIPPED * skip-marker"])
    result.stdout.fnmatch_lines(["XFAIL *test_xfails - xfail-marker"])
    result.stdout.fnmatch_lines(["XPASS *test_xpasses - xpass-marker"])
    result.stdout.fnmatch_lines(["FAILED *test_xpasses_strictly*"])
    junit = (ourtester.path / "junit.xml").read_text()
    assert '<property name="answer" value="42"' in junit
    slow = junit.split('name="test_passes_slowly"')[1].split('time="')[1].split('"')[0]
    assert float(slow) >= 0.3


def test_the_guard_works_in_the_child(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest
        import torch._inductor.config as inductor

        @pytest.mark.cudagraph_subprocess
        def test_leaks():
            inductor.max_autotune = True
        """
    )
    result = ourtester.runpytest("--cudagraph-guard=fail")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*max_autotune*False*True*"])


CRASHES = """
import ctypes
import os
import pytest

pytestmark = pytest.mark.cudagraph_subprocess

def test_segfaults():
    ctypes.string_at(0)

def test_aborts():
    os.abort()

def test_exits():
    print("last-words")
    os._exit(3)

def test_after():
    pass
"""


def test_a_dead_process_fails_its_test_and_the_session_goes_on(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(CRASHES)
    result = ourtester.runpytest()
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "cudagraph_subprocess: test process died with SIGSEGV (signal 11)",
            "Fatal Python error: Segmentation fault",
        ]
    )
    result.stdout.fnmatch_lines(["cudagraph_subprocess: test process died with SIGABRT (signal 6)"])
    result.stdout.fnmatch_lines(["cudagraph_subprocess: test process died with exit code 3"])


def test_uncaptured_output_of_a_dead_process_is_shown(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(CRASHES)
    result = ourtester.runpytest("-s", "-k", "exits")
    result.assert_outcomes(failed=1, deselected=3)
    result.stdout.fnmatch_lines(["*Captured stdout (test process *)*", "*last-words"])


def test_a_hung_process_is_killed_with_its_group_and_its_stacks_shown(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    ourtester.makepyfile(
        """
        import os
        import subprocess
        import sys
        import time
        import pytest

        @pytest.mark.cudagraph_subprocess(timeout=1)
        def test_hangs(tmp_path):
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            with open(os.environ["PIDS"], "w") as file:
                file.write(f"{os.getpid()} {helper.pid}\\n")
            time.sleep(120)

        def test_after():
            pass
        """
    )
    pids = ourtester.path / "pids"
    monkeypatch.setenv("PIDS", str(pids))
    start = time.monotonic()
    result = ourtester.runpytest()
    assert time.monotonic() - start < 60
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cudagraph_subprocess: test process timed out after 1 s and was killed with its "
            "process group",
            "its Python stacks when it was stopped:",
            "*line 12 in test_hangs*",
        ]
    )
    assert all_gone([int(pid) for pid in pids.read_text().split()])


def test_exceptions_that_cannot_be_pickled_and_huge_output_arrive(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(
        """
        import threading
        import pytest

        class Unpicklable(Exception):
            def __init__(self):
                super().__init__("unpicklable-marker")
                self.lock = threading.Lock()

            def __reduce__(self):
                raise TypeError("this exception cannot be pickled")

        @pytest.mark.cudagraph_subprocess
        def test_raises():
            raise Unpicklable()

        @pytest.mark.cudagraph_subprocess
        def test_prints_ten_megabytes():
            print("x" * 10_000_000)
            print("end-of-output-marker")
            assert False
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [">       raise Unpicklable()", "E       *Unpicklable: unpicklable-marker"]
    )
    result.stdout.fnmatch_lines(["end-of-output-marker"])
    assert max(len(line) for line in result.outlines) >= 10_000_000


def test_the_report_shows_the_process_and_a_dead_one(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import ctypes
        import os
        import pytest

        @pytest.mark.cudagraph_subprocess(trees=False, env={"TORCHINDUCTOR_EXTRA": "1"})
        def test_passes():
            print(os.getpid())

        @pytest.mark.cudagraph_subprocess
        def test_segfaults():
            ctypes.string_at(0)
        """
    )
    result = ourtester.runpytest("--cudagraph-report", "--cudagraph-report=json:report.json")
    result.assert_outcomes(passed=1, failed=1)
    records = {
        r["nodeid"].split("::")[1]: r
        for r in json.loads((ourtester.path / "report.json").read_text())["tests"]
    }
    passed, dead = records["test_passes"], records["test_segfaults"]
    assert passed["where"].startswith("subprocess ")
    assert int(passed["where"].split()[1]) != os.getpid()
    assert passed["settings"]["triton.cudagraphs"] == {"value": True, "source": "test"}
    assert passed["settings"]["triton.cudagraph_trees"] == {"value": False, "source": "test"}
    assert passed["env"]["TORCHINDUCTOR_EXTRA"] == "1"
    assert dead["outcome"] == "failed"
    [error] = dead["errors"]
    assert error["kind"] == "process-crash"
    assert error["type"] == "SIGSEGV"
    assert error["thread"] == "MainThread"  # the crashing thread, named by the journal
    result.stdout.fnmatch_lines(["*test_segfaults  failed  [[]subprocess *[]]"])


def test_outcomes_are_the_same_under_xdist(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        CRASHES
        + """
@pytest.mark.skip(reason="skipped")
def test_skipped():
    pass

@pytest.mark.xfail
def test_xfailed():
    assert False
"""
    )
    plain = ourtester.runpytest("--cudagraph-report=json:plain.json")
    spread = ourtester.runpytest("-n", "2", "--cudagraph-report=json:spread.json")
    plain.assert_outcomes(passed=1, failed=3, skipped=1, xfailed=1)
    spread.assert_outcomes(passed=1, failed=3, skipped=1, xfailed=1)

    def summary(name: str) -> list[tuple[str, str, list[str]]]:
        tests = json.loads((ourtester.path / name).read_text())["tests"]
        return sorted((t["nodeid"], t["outcome"], [e["kind"] for e in t["errors"]]) for t in tests)

    assert summary("plain.json") == summary("spread.json")
    assert len(summary("plain.json")) == 6


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("timeout=0", "argument 'timeout' must be a positive number, got 0"),
        ("timeout=-1.5", "argument 'timeout' must be a positive number, got -1.5"),
        ("timeout='5'", "argument 'timeout' must be a positive number, got '5'"),
        ("env={'A': 1}", "argument 'env' must be a str->str mapping*got the item 'A': 1"),
        ("env=['A']", "argument 'env' must be a str->str mapping, got [[]'A'[]]"),
        ("trees='no'", "argument 'trees' must be True or False, got 'no'"),
        ("colour=1", "unknown argument 'colour' (known: timeout, trees, env, require_cuda)"),
        ("600", "takes keyword arguments only, got 600: pass it by keyword, e.g. timeout=600"),
    ],
)
def test_bad_marker_arguments_error_that_test_at_setup(
    ourtester: pytest.Pytester, arguments: str, message: str
) -> None:
    ourtester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.cudagraph_subprocess({arguments})
        def test_marked():
            pass

        def test_beside_it():
            pass
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(errors=1, passed=1)
    result.stdout.fnmatch_lines(
        [f"*test_bad.py::test_marked: @pytest.mark.cudagraph_subprocess: {message}*"]
    )


def test_the_marker_is_documented(ourtester: pytest.Pytester) -> None:
    result = ourtester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.cudagraph_subprocess(*, timeout=300.0, trees=True, env=None, "
            "require_cuda=False): run the whole test*"
        ]
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
def test_require_cuda_skips_without_a_device(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_subprocess(require_cuda=True)
        def test_needs_cuda():
            raise AssertionError("must not run")
        """
    )
    result = ourtester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * CUDA is not available"])


SLEEPER = """
import os
import time
import pytest

@pytest.mark.cudagraph_subprocess
def test_sleeps():
    zygote = os.getppid()
    children = f"/proc/{zygote}/task/{zygote}/children"
    while len(open(children).read().split()) < 2:  # and a spare, set up for test_next
        time.sleep(0.05)
    [spare] = [pid for pid in open(children).read().split() if pid != str(os.getpid())]
    with open(os.environ["PIDS"], "w") as file:
        zygote_folder = os.readlink(f"/proc/{zygote}/cwd")
        file.write(f"{os.getpid()} {zygote} {spare} {zygote_folder}\\n")
    time.sleep(120)


@pytest.mark.cudagraph_subprocess
def test_next():
    pass
"""


INTERRUPTIBLE_PYTEST = (
    "import signal, sys, pytest\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "sys.exit(pytest.main())\n"
)


def _session_in_background(
    ourtester: pytest.Pytester, pids: Path, **env: str
) -> subprocess.Popen[bytes]:
    """A pytest session in its own process, its test told where to write its pids.

    SIGINT is given back its default handler: a shell that starts our own run in the background
    (`pytest ... &`) leaves it ignored, and Python keeps an inherited SIG_IGN.
    """
    return subprocess.Popen(
        [sys.executable, "-c", INTERRUPTIBLE_PYTEST],
        cwd=ourtester.path,
        env={**os.environ, "PIDS": str(pids), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["interrupted", "killed"])
def test_no_process_outlives_the_session(ourtester: pytest.Pytester, stop: signal.Signals) -> None:
    ourtester.makepyfile(SLEEPER)
    pids = ourtester.path / "pids"
    session = _session_in_background(ourtester, pids)
    try:
        *processes, folder = wait_for(pids).split()
        session.send_signal(stop)
        output = session.communicate(timeout=60)[0].decode()
    finally:
        session.kill()
        session.wait()
    if stop == signal.SIGINT:
        assert "KeyboardInterrupt" in output
    assert all_gone([int(pid) for pid in processes])  # the test's, the zygote, the spare
    assert "pytest-cudagraph-subprocess-" in folder
    assert not Path(folder).exists()


def _site_whose_zygote_cannot_fork(ourtester: pytest.Pytester) -> Path:
    """A sitecustomize that starts a thread in the zygote, as a library's thread pool would."""
    site = ourtester.mkdir("site")
    (site / "sitecustomize.py").write_text(
        "import sys, threading, time\n"
        "if sys.argv[-1] == 'serve':\n"
        "    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    )
    return site


def test_a_zygote_that_cannot_fork_safely_gives_way_to_spawned_interpreters(
    ourtester: pytest.Pytester,
) -> None:
    site = _site_whose_zygote_cannot_fork(ourtester)
    ourtester.makepyfile(
        f"""
        import os
        import pytest
        import torch._inductor.config as inductor

        @pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})
        def test_spawned():
            assert os.getppid() == {os.getpid()}
            assert inductor.triton.cudagraphs is True
        """
    )
    result = ourtester.runpytest("-W", "error::pytest_cudagraph_guard.CudagraphGuardWarning")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: cudagraph_subprocess: the zygote would not fork: the zygote "
            "has * OS threads; each marked test now starts a fresh interpreter instead*"
        ]
    )


def test_a_thread_pool_that_stops_before_fork_does_not_cost_the_zygote(
    ourtester: pytest.Pytester,
) -> None:
    """As numpy's OpenBLAS does: its threads end in a pthread_atfork handler."""
    site = ourtester.mkdir("site")
    (site / "sitecustomize.py").write_text(
        "import os, sys, threading\n"
        "if sys.argv[-1] == 'serve':\n"
        "    stop = threading.Event()\n"
        "    pool = threading.Thread(target=stop.wait, daemon=True)\n"
        "    pool.start()\n"
        "    def shut_down():\n"
        "        stop.set()\n"
        "        pool.join()\n"
        "    os.register_at_fork(before=shut_down)\n"
    )
    ourtester.makepyfile(
        f"""
        import os
        import pytest

        @pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})
        def test_forked():
            assert os.getppid() != {os.getpid()}
        """
    )
    result = ourtester.runpytest("-W", "error::pytest_cudagraph_guard.CudagraphGuardWarning")
    result.assert_outcomes(passed=1)


def test_a_test_process_imports_what_its_test_needs_and_the_zygote_learns_it(
    ourtester: pytest.Pytester,
) -> None:
    """Where config is process-wide (torch <= 2.11), a test that never compiles is spared
    importing inductor, one that does finds CUDA graphs on, neither counted as the test's change
    by the guard, and the test processes after it find inductor and dynamo loaded. From 2.12
    the settings are made before the test, in its main thread, so every test finds them."""
    lazy = settings_can_wait_for_import()
    ourtester.makepyfile(
        f"""
        import os
        import sys
        import pytest

        @pytest.mark.cudagraph_subprocess
        def test_1_never_compiles():
            assert os.getppid() != {os.getpid()}
            assert ("torch._inductor.config" in sys.modules) is {not lazy}

        @pytest.mark.cudagraph_subprocess
        def test_2_reads_the_config(inductor_config):
            assert inductor_config["triton.cudagraphs"] is True
            assert inductor_config["triton.cudagraph_trees"] is True
            inductor_config["triton.cudagraph_trees"] = False

        @pytest.mark.cudagraph_subprocess  # not in the process set up during test_2 without them
        def test_3_after_it():
            assert "torch._dynamo" in sys.modules
            import torch._inductor.config as inductor
            assert inductor.triton.cudagraphs is True
            assert inductor.triton.cudagraph_trees is True
        """
    )
    result = ourtester.runpytest(
        "--cudagraph-guard=fail", "-W", "error::pytest_cudagraph_guard.CudagraphGuardWarning"
    )
    result.assert_outcomes(passed=3)


def test_a_spawned_test_process_dies_with_a_killed_session(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _site_whose_zygote_cannot_fork(ourtester)
    # A temporary folder of this test's own: other sessions (xdist's other worker) sweep theirs.
    private_tmp = ourtester.mkdir("tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    ourtester.makepyfile(
        f"""
        import os
        import time
        import pytest

        @pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})
        def test_sleeps():
            with open(os.environ["PIDS"], "w") as file:
                file.write(f"{{os.getpid()}} {{os.getppid()}}\\n")
            time.sleep(120)
        """
    )
    pids = ourtester.path / "pids"
    session = _session_in_background(ourtester, pids, TMPDIR=str(private_tmp))
    try:
        child, parent = (int(pid) for pid in wait_for(pids).split())
        assert parent == session.pid  # spawned by the session itself, not by a zygote
        session.kill()
        session.wait(timeout=30)
    finally:
        session.kill()
        session.wait()
    assert all_gone([child])
    owners = private_tmp.glob("pytest-cudagraph-subprocess-*/owner.pid")
    [left] = [owner.parent for owner in owners if owner.read_text() == str(session.pid)]

    ourtester.makepyfile(test_sleeps="def test_nothing():\n    pass\n")
    ourtester.makepyfile(
        test_next="import pytest\n\n@pytest.mark.cudagraph_subprocess\ndef test_x():\n    pass\n"
    )
    ourtester.runpytest("test_next.py").assert_outcomes(passed=1)
    assert not left.exists()  # the next session removed what the killed one left


def test_an_action_after_import_runs_once_the_module_is_executed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How a test process applies the cudagraph settings where it may wait for inductor."""
    from pytest_cudagraph_guard._torch import run_after_import

    (tmp_path / "late_config.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "late_config", None)
    monkeypatch.delitem(sys.modules, "late_config")  # and removed again when the test ends
    seen: list[int] = []

    def action() -> None:
        module = sys.modules["late_config"]
        seen.append(module.VALUE)
        module.VALUE = 2

    assert run_after_import("late_config", action)
    import late_config

    assert (late_config.VALUE, seen) == (2, [1])
    assert not run_after_import("late_config", action)
    assert seen == [1]
    assert "exec_module" not in vars(late_config.__loader__)  # the loader is left as it was


def _installed_plugins(ourtester: pytest.Pytester, log: Path) -> Path:
    """Two installed pytest plugins, found through their entry points: one imports quietly, one
    starts a thread when imported. Each logs the pid of every process that imports it."""
    site = ourtester.mkdir("site")
    record = (
        f"import os\nwith open({str(log)!r}, 'a') as f:\n"
        "    f.write(f'{__name__} {os.getpid()}\\n')\n"
    )
    (site / "quiet_plugin.py").write_text(record)
    (site / "busy_plugin.py").write_text(
        record + "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    )
    info = site / "cgg_demo_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cgg-demo-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nquiet = quiet_plugin\nbusy = busy_plugin\n")
    return site


def test_the_zygote_loads_the_plugins_test_processes_load_if_forks_stay_sound(
    ourtester: pytest.Pytester,
) -> None:
    log = ourtester.path / "imports.log"
    site = _installed_plugins(ourtester, log)
    ourtester.makepyfile(
        f"""
        import os
        import pytest

        def imported_by(name):
            lines = open({str(log)!r}).read().split()
            return [int(pid) for module, pid in zip(lines[::2], lines[1::2]) if module == name]

        marked = pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})

        @marked
        def test_1():
            assert os.getpid() in imported_by("quiet_plugin")

        @marked
        def test_2():
            zygote = os.getppid()
            assert zygote != {os.getpid()}
            assert zygote in imported_by("quiet_plugin")  # learned from test_1
            assert zygote not in imported_by("busy_plugin")  # refused: it starts a thread

        @marked  # in a process forked once the zygote had learned
        def test_3():
            assert os.getpid() not in imported_by("quiet_plugin")
            assert os.getpid() in imported_by("busy_plugin")
        """
    )
    result = ourtester.runpytest("-W", "error::pytest_cudagraph_guard.CudagraphGuardWarning")
    result.assert_outcomes(passed=3)


def test_the_zygote_loads_the_sessions_plugins_while_the_first_test_process_runs(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent session has loaded an installed plugin: its zygote tries and loads it while
    the first test process starts without it, so that the next one finds it loaded."""
    log = ourtester.path / "imports.log"
    site = _installed_plugins(ourtester, log)
    (site / "busy_plugin.py").unlink()  # this session's own process loads these plugins too
    entry_points = site / "cgg_demo_plugins-1.0.dist-info" / "entry_points.txt"
    entry_points.write_text("[pytest11]\nquiet = quiet_plugin\n")
    monkeypatch.syspath_prepend(str(site))
    ourtester.makepyfile(
        f"""
        import os
        import time
        import pytest

        def imported_by(name):
            lines = open({str(log)!r}).read().split()
            return [int(pid) for module, pid in zip(lines[::2], lines[1::2]) if module == name]

        @pytest.mark.cudagraph_subprocess
        def test_1():
            assert os.getpid() in imported_by("quiet_plugin")  # forked before the zygote had it
            deadline = time.monotonic() + 20
            while os.getppid() not in imported_by("quiet_plugin"):  # the zygote, meanwhile
                assert time.monotonic() < deadline
                time.sleep(0.05)

        @pytest.mark.cudagraph_subprocess
        def test_2():
            assert os.getppid() in imported_by("quiet_plugin")
            assert os.getpid() not in imported_by("quiet_plugin")  # found it loaded
        """
    )
    result = ourtester.runpytest("-W", "error::pytest_cudagraph_guard.CudagraphGuardWarning")
    result.assert_outcomes(passed=2)
    assert f"quiet_plugin {os.getpid()}" in log.read_text().splitlines()  # the session's own


# What a test process must not hold: a module only the parent session runs, or a second copy
# of a module of the plugin (as ``python -m`` of a module the plugin also imports would make).
LOADS_ONLY_WHAT_IT_NEEDS = """
import os
import sys

import pytest_cudagraph_guard

PACKAGE_DIR = os.path.dirname(pytest_cudagraph_guard.__file__)
PARENT_ONLY = [
    "pytest_cudagraph_guard.isolation.controller",
    "pytest_cudagraph_guard.isolation.pool",
]


def check_modules():
    assert [name for name in PARENT_ONLY if name in sys.modules] == []
    assert "pytest_cudagraph_guard.isolation.__main__" not in sys.modules
    main_file = sys.modules["__main__"].__file__
    assert main_file.endswith(os.path.join("isolation", "__main__.py"))
    modules_of = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if path.startswith(PACKAGE_DIR):
            modules_of.setdefault(path, set()).add(id(module))
    assert {path: len(ids) for path, ids in modules_of.items() if len(ids) > 1} == {}
"""


def test_a_zygotes_test_processes_hold_no_parent_only_module_and_no_second_copy(
    ourtester: pytest.Pytester,
) -> None:
    """The later test processes are forked once the zygote has loaded what the session and the
    first test process loaded: the parent's runner, had it let it through, would be there."""
    ourtester.makepyfile(
        LOADS_ONLY_WHAT_IT_NEEDS
        + """
import pytest

@pytest.mark.cudagraph_subprocess
@pytest.mark.parametrize("n", range(3))
def test_forked(n):
    assert os.getppid() != int(os.environ["SESSION_PID"])  # a fork of the zygote
    check_modules()
"""
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SESSION_PID", str(os.getpid()))
        result = ourtester.runpytest("-W", "error::pytest_cudagraph_guard.CudagraphGuardWarning")
    result.assert_outcomes(passed=3)


def test_a_spawned_test_process_holds_no_parent_only_module_and_no_second_copy(
    ourtester: pytest.Pytester,
) -> None:
    site = _site_whose_zygote_cannot_fork(ourtester)
    ourtester.makepyfile(
        LOADS_ONLY_WHAT_IT_NEEDS
        + f"""
import pytest

@pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})
def test_spawned():
    assert os.getppid() == {os.getpid()}
    check_modules()
"""
    )
    result = ourtester.runpytest()
    result.assert_outcomes(passed=1, warnings=1)
