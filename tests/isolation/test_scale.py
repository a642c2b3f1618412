"""What a test process costs does not depend on what is installed or on how big the suite is:
it finds loaded what the session's plugins import as they start and end, and it collects only
its own test. Counted, not timed: which modules a test process imported itself, and what its
collection visited."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.wide  # every test here: see tests/conftest.py

# Each test process records, as its conftest is imported (the start of its session), whether
# hypothesis was loaded then. Each test waits until the process of the test before it has
# ended (a zombie until the zygote reaps it), so that the zygote, which reaps it on the next
# request, has learned what its session imported as it ended (hypothesis's plugin imports
# hypothesis in its terminal summary) before it forks the process for the test after that.
RECORDING_CONFTEST = """
import json
import os
import sys
import time

import pytest

if "CGG_SESSION_PID" not in os.environ:
    os.environ["CGG_SESSION_PID"] = str(os.getpid())
if os.environ["CGG_SESSION_PID"] != str(os.getpid()):
    with open(os.environ["CGG_LOADED"], "a") as loaded:
        loaded.write(json.dumps([os.getpid(), "hypothesis" in sys.modules]) + "\\n")


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(autouse=True)
def after_the_process_before():
    with open(os.environ["CGG_RAN"], "a+") as ran:
        ran.seek(0)
        earlier = ran.read().split()
        ran.write(f"{os.getpid()}\\n")
    deadline = time.monotonic() + 60
    while earlier and _running(int(earlier[-1])) and time.monotonic() < deadline:
        time.sleep(0.02)
"""


def test_a_test_process_finds_loaded_what_the_sessions_plugins_import_as_it_ends(
    ourtester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hypothesis's pytest plugin imports hypothesis as each session ends: the first test
    processes import it themselves, the later ones find it loaded by the zygote."""
    pytest.importorskip("_hypothesis_pytestplugin", reason="hypothesis is in the test extra")
    loaded_file, ran_file = tmp_path / "loaded.jsonl", tmp_path / "ran"
    monkeypatch.setenv("CGG_LOADED", str(loaded_file))
    monkeypatch.setenv("CGG_RAN", str(ran_file))
    monkeypatch.delenv("CGG_SESSION_PID", raising=False)
    ourtester.makeconftest(RECORDING_CONFTEST)
    ourtester.makepyfile(
        "import pytest\n\n@pytest.mark.parametrize('n', range(6))\ndef test_n(n):\n    pass\n"
    )
    result = ourtester.runpytest("--cudagraph-subprocess", "-p", "hypothesispytest")
    result.assert_outcomes(passed=6)
    loaded = dict(json.loads(line) for line in loaded_file.read_text().splitlines())
    found = [loaded[int(pid)] for pid in ran_file.read_text().split()]
    assert found[0] is False  # the first imported it itself
    assert found[-3:] == [True, True, True]  # forked once the zygote had learned it


# Records, in each test process, the test items it built and the files its collection was
# offered: what a process does for its test, whatever the module's or the directory's size.
COUNTING_CONFTEST = """
import json
import os

import pytest

if "CGG_SESSION_PID" not in os.environ:
    os.environ["CGG_SESSION_PID"] = str(os.getpid())


def _record(kind, name):
    if os.environ["CGG_SESSION_PID"] != str(os.getpid()):
        with open(os.environ["CGG_COUNTS"], "a") as counts:
            counts.write(json.dumps([os.getpid(), kind, name]) + "\\n")


def pytest_itemcollected(item):
    _record("item", item.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector, name, obj):
    made = yield
    built = made if isinstance(made, list) else [made] if made is not None else []
    for item in built:
        _record("built", item.name)
    return made


def pytest_collect_file(file_path, parent):
    _record("file", file_path.name)
"""


@pytest.mark.parametrize(("cases", "files"), [(3, 3), (60, 30)])
def test_what_a_test_process_collects_does_not_grow_with_the_module_or_the_directory(
    ourtester: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cases: int,
    files: int,
) -> None:
    """One parametrized test of ``cases`` cases beside ``files`` one-test files: each test
    process builds one test item and is offered one file, its own, whatever the sizes."""
    counts_file = tmp_path / "counts.jsonl"
    monkeypatch.setenv("CGG_COUNTS", str(counts_file))
    monkeypatch.delenv("CGG_SESSION_PID", raising=False)
    ourtester.makeconftest(COUNTING_CONFTEST)
    ourtester.makepyfile(
        test_cases="import pytest\n\n"
        f"@pytest.mark.parametrize('n', range({cases}))\ndef test_n(n):\n    pass\n",
        **{f"test_file_{i}": "def test_one():\n    pass\n" for i in range(files)},
    )
    selected = ["test_cases.py::test_n[1]", f"test_cases.py::test_n[{cases - 1}]"]
    result = ourtester.runpytest("--cudagraph-subprocess", *selected, "test_file_0.py")
    result.assert_outcomes(passed=3)
    by_process: dict[int, dict[str, list[str]]] = {}
    for line in counts_file.read_text().splitlines():
        pid, kind, name = json.loads(line)
        by_process.setdefault(pid, {"item": [], "built": [], "file": []})[kind].append(name)
    ran = [counted for counted in by_process.values() if counted["item"]]
    assert sorted(counted["item"][0] for counted in ran) == sorted(
        [*selected, "test_file_0.py::test_one"]
    )
    built_and_offered = [(len(counted["built"]), len(counted["file"])) for counted in ran]
    assert built_and_offered == [(1, 1)] * 3
    assert os.getpid() not in by_process
