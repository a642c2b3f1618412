"""The zygote of ``cudagraph_subprocess``: it gives way to spawned interpreters where it cannot
fork safely, learns what its test processes import, loads the session's plugins, and its test
processes hold no module of the parent's own. Real sessions, real processes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from pytest_cudagraph_guard._torch.cudagraph_settings import settings_can_wait_for_import

from ..helpers import all_gone, session_in_background, wait_for
from .conftest import FORKED_BY_A_ZYGOTE


def _site_whose_zygote_cannot_fork(ourtester: pytest.Pytester) -> Path:
    """A sitecustomize that starts a thread in the zygote, as a library's thread pool would."""
    site = ourtester.mkdir("site")
    (site / "sitecustomize.py").write_text(
        "import sys, threading, time\n"
        "if sys.argv[-1] == 'serve':\n"
        "    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    )
    return site


@pytest.mark.wide
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
{FORKED_BY_A_ZYGOTE}
@pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})
def test_forked():
    assert forked_by_a_zygote()
"""
    )
    result = ourtester.runpytest("-W", "error::pytest_cudagraph_guard.CudagraphGuardWarning")
    result.assert_outcomes(passed=1)


@pytest.mark.wide
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
{FORKED_BY_A_ZYGOTE}
@pytest.mark.cudagraph_subprocess
def test_1_never_compiles():
    assert forked_by_a_zygote()
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


@pytest.mark.wide
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
    session = session_in_background(ourtester, pids, TMPDIR=str(private_tmp))
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


def _imported_by(log: Path) -> str:
    """For an inner test module: ``imported_by(module)``, the processes that imported it."""
    return f"""
def imported_by(name):
    lines = open({str(log)!r}).read().split()
    return [int(pid) for module, pid in zip(lines[::2], lines[1::2]) if module == name]
"""


@pytest.mark.wide
def test_the_zygote_loads_the_plugins_test_processes_load_if_forks_stay_sound(
    ourtester: pytest.Pytester,
) -> None:
    log = ourtester.path / "imports.log"
    site = _installed_plugins(ourtester, log)
    ourtester.makepyfile(
        f"""
import os
import pytest
{FORKED_BY_A_ZYGOTE}{_imported_by(log)}
marked = pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})

@marked
def test_1():
    assert os.getpid() in imported_by("quiet_plugin")

@marked
def test_2():
    assert forked_by_a_zygote()
    zygote = os.getppid()
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


@pytest.mark.wide
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
{_imported_by(log)}
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
    "pytest_cudagraph_guard.isolation.runner",
    "pytest_cudagraph_guard.isolation.pool",
    "pytest_cudagraph_guard.isolation.processes",
    "pytest_cudagraph_guard.isolation.folders",
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


@pytest.mark.wide
def test_a_zygotes_test_processes_hold_no_parent_only_module_and_no_second_copy(
    ourtester: pytest.Pytester,
) -> None:
    """The later test processes are forked once the zygote has loaded what the session and the
    first test process loaded: the parent's runner, had it let it through, would be there."""
    ourtester.makepyfile(
        LOADS_ONLY_WHAT_IT_NEEDS
        + FORKED_BY_A_ZYGOTE
        + """
import pytest

@pytest.mark.cudagraph_subprocess
@pytest.mark.parametrize("n", range(3))
def test_forked(n):
    assert forked_by_a_zygote()
    check_modules()
"""
    )
    result = ourtester.runpytest("-W", "error::pytest_cudagraph_guard.CudagraphGuardWarning")
    result.assert_outcomes(passed=3)


def test_a_zygote_that_cannot_fork_safely_gives_way_to_spawned_interpreters(
    ourtester: pytest.Pytester,
) -> None:
    """The spawned test process, like a forked one, holds no parent-only module and no second
    copy of one (one session for both: each spawned interpreter imports torch afresh)."""
    site = _site_whose_zygote_cannot_fork(ourtester)
    ourtester.makepyfile(
        LOADS_ONLY_WHAT_IT_NEEDS
        + f"""
import pytest
import torch._inductor.config as inductor

@pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})
def test_spawned():
    assert os.getppid() == {os.getpid()}
    assert inductor.triton.cudagraphs is True
    check_modules()
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
