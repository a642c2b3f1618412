"""ini ``cudagraph_process_env``: variables set in every test process (spares included) before
it initialises CUDA. On a machine without a GPU, CUDA is a stand-in module (``fake_cuda``), each
process that initialises it logging the two variables as it saw them then. Real sessions, real
processes."""

from __future__ import annotations

import pytest

from ..conftest import QUIET_INI
from ..helpers import all_gone, read_report
from .conftest import FakeCuda, logged

TESTS = """
import os
import sys
import pytest


def note():
    with open(os.environ["RAN"], "a") as log:
        seen = (os.environ.get("CGG_CONNECTIONS"), os.environ.get("CGG_OWN"))
        log.write(f"{os.getpid()} {'fake_cuda' in sys.modules} {seen[0]} {seen[1]}\\n")


def test_1_uses_cuda():
    note()
    import fake_cuda


@pytest.mark.parametrize("n", range(2, 6))
def test_later(n):
    note()


@pytest.mark.cudagraph_subprocess(env={"CGG_OWN": "mine", "CGG_CONNECTIONS": "8"})
def test_its_own_env_wins():
    note()


@pytest.mark.cudagraph_main_thread
def test_in_the_session_process():
    assert "CGG_CONNECTIONS" not in os.environ
"""

PROCESS_ENV = "cudagraph_process_env =\n    CGG_CONNECTIONS=1\n"


@pytest.fixture
def env_tester(fake_cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("CGG_CONNECTIONS", raising=False)
    tester = fake_cuda("CGG_CONNECTIONS", "CGG_OWN")
    tester.makepyfile(TESTS)
    return tester


@pytest.mark.wide
def test_every_test_process_has_the_variables_before_it_initialises_cuda(
    env_tester: pytest.Pytester,
) -> None:
    env_tester.makeini(f"{QUIET_INI}{PROCESS_ENV}cudagraph_spares = 2\n")
    result = env_tester.runpytest(
        "-p", "no:cacheprovider", "-p", "no:randomly", "--cudagraph-subprocess"
    )
    result.assert_outcomes(passed=7)
    result.stdout.no_fnmatch_line("*CudagraphGuardWarning*")
    ran = {
        int(pid): (ahead == "True", seen, own)
        for pid, ahead, seen, own in logged(env_tester, "ran.log")
    }
    inits = {int(pid): (seen, own) for pid, seen, own in logged(env_tester, "inits.log")}
    assert all_gone(list(ran) + list(inits))
    by_test = list(ran.values())
    assert [seen for _, seen, _ in by_test[:5]] == ["1"] * 5
    assert by_test[5][1:] == ("8", "mine")  # the marker's own env wins
    ahead = [pid for pid, (set_up, _, _) in ran.items() if set_up]
    assert ahead  # later tests found "CUDA" set up by a spare ahead of them
    assert all(inits[pid] == ("1", "None") for pid in ahead)  # with the variable set then
    assert all(seen in ("1", "8") for seen, _ in inits.values())


def test_the_report_shows_the_variables(env_tester: pytest.Pytester) -> None:
    env_tester.makeini(f"{QUIET_INI}{PROCESS_ENV}    CGG_OTHER = two words\n")
    env_tester.makepyfile("def test_one():\n    pass\n")
    result = env_tester.runpytest("-p", "no:cacheprovider", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=1)
    options = read_report(env_tester.path / "r.json")["environment"]["options"]
    assert options["process_env"] == {"CGG_CONNECTIONS": "1", "CGG_OTHER": "two words"}
    assert options["origins"]["process_env"] == "ini option cudagraph_process_env"


@pytest.mark.parametrize("line", ["CGG_CONNECTIONS", "=1", "CGG CONNECTIONS=1", "1CGG=1"])
def test_a_line_that_is_not_name_equals_value_is_a_usage_error(
    ourtester: pytest.Pytester, line: str
) -> None:
    ourtester.makeini(f"{QUIET_INI}cudagraph_process_env =\n    OK=1\n    {line}\n")
    ourtester.makepyfile("def test_one():\n    pass\n")
    result = ourtester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: ini option cudagraph_process_env: expected lines of NAME=VALUE *, got {line!r}"]
    )
