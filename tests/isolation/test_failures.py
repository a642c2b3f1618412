"""What a user reads when a ``cudagraph_subprocess`` test's process crashes or hangs (one screen,
each stack once, the user's frames only), xfail across the process boundary, and what the
zygote and the parent say once where they cannot do part of their work. Real sessions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..helpers import read_report

SCREEN = 25
PLUGIN_FRAMES = ("pluggy", "_pytest", "zygote.py", "forking.py", "child.py", "runpy")


def plugin_frames(failure: list[str]) -> list[str]:
    frames = [line for line in failure if line.lstrip().startswith('File "')]
    return [frame for frame in frames if any(name in frame for name in PLUGIN_FRAMES)]


def failure_of(output: str, test: str) -> list[str]:
    """The lines of ``test``'s failure section in a terminal ``output``, its title included."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^_+ {test} _+$", line))
    end = next(
        i
        for i in range(start + 1, len(lines))
        if re.match(r"^_+ \w+ _+$", lines[i]) or lines[i].startswith("=")
    )
    return lines[start:end]


# The crashes get a long timeout and only the hangs a short one: a session's first test process
# imports its plugins itself, which takes seconds on a loaded machine with many installed.
CRASHES = """
import ctypes
import os
import time
import pytest

pytestmark = pytest.mark.cudagraph_subprocess(timeout=60)

def test_aborts():
    os.abort()

def test_segfaults():
    ctypes.string_at(0)

@pytest.mark.cudagraph_subprocess(timeout=3)
def test_hangs():
    time.sleep(120)
"""


@pytest.fixture
def crashes(ourtester: pytest.Pytester) -> pytest.Pytester:
    ourtester.makepyfile(CRASHES)
    return ourtester


@pytest.mark.wide
def test_crashes_and_a_timeout_read_in_one_screen_each_with_its_stack_once(
    crashes: pytest.Pytester,
) -> None:
    """One session for the three: each test's failure is its own screen."""
    result = crashes.runpytest()
    result.assert_outcomes(failed=3)
    output = result.stdout.str()
    for test, fatal, line in (
        ("test_aborts", "Fatal Python error: Aborted", 9),
        ("test_segfaults", "Fatal Python error: Segmentation fault", 12),
    ):
        failure = failure_of(output, test)
        text = "\n".join(failure)
        assert len(failure) <= SCREEN, text
        assert "cudagraph_subprocess: test process died with SIG" in text
        assert text.count(fatal) == 1
        assert text.count(f"line {line} in {test}") == 1
        assert "frames of pytest and its plugins: hidden, --full-trace shows them" in text
        assert not plugin_frames(failure), text
        assert "last lines of its stderr" not in text
        assert "Extension modules" not in text
    failure = failure_of(output, "test_hangs")
    text = "\n".join(failure)
    assert len(failure) <= SCREEN, text
    assert "test process timed out after 3 s" in text
    assert "its Python stacks when it was stopped:" in text
    assert text.count("line 16 in test_hangs") == 1
    assert not plugin_frames(failure), text
    assert "last lines of its stderr" not in text
    assert "(empty)" not in text


@pytest.mark.wide
def test_full_trace_shows_every_frame(crashes: pytest.Pytester) -> None:
    result = crashes.runpytest("-k", "test_aborts", "--full-trace")
    result.assert_outcomes(failed=1)
    text = "\n".join(failure_of(result.stdout.str(), "test_aborts"))
    assert "pluggy" in text
    assert text.count("line 9 in test_aborts") == 1
    assert "hidden" not in text


@pytest.mark.wide
def test_what_else_the_process_wrote_stays_in_its_captured_stderr(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        import sys

        def pytest_configure(config):
            print("set-up-words", file=sys.stderr)
        """
    )
    ourtester.makepyfile(
        """
        import os
        import pytest

        @pytest.mark.cudagraph_subprocess
        def test_aborts():
            os.abort()
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["Fatal Python error: Aborted", "*Captured stderr (test process *)*", "set-up-words"]
    )


XFAILS = """
import os
import time
import pytest

pytestmark = pytest.mark.cudagraph_subprocess(timeout=60)

@pytest.mark.xfail(reason="it crashes")
def test_crash_expected():
    os.abort()

@pytest.mark.xfail(reason="it hangs")
@pytest.mark.cudagraph_subprocess(timeout=2)
def test_hang_expected():
    time.sleep(120)

@pytest.mark.xfail(raises=ValueError)
def test_crash_is_no_value_error():
    os.abort()

@pytest.mark.xfail(False, reason="not here")
def test_crash_not_expected_here():
    os.abort()

@pytest.mark.xfail(strict=True)
def test_xpass_strict():
    pass
"""


def test_a_crash_or_timeout_of_an_xfail_test_is_xfailed_as_under_pytest_forked(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(XFAILS)
    result = ourtester.runpytest("-rfxX", "--cudagraph-report=json:report.json")
    result.assert_outcomes(xfailed=2, failed=3)
    result.stdout.fnmatch_lines_random(
        [
            "XFAIL *::test_crash_expected - it crashes; test process died with SIGABRT*",
            "XFAIL *::test_hang_expected - it hangs; test process timed out after 2 s*",
            "FAILED *::test_crash_is_no_value_error*",
            "FAILED *::test_crash_not_expected_here*",
            "FAILED *::test_xpass_strict*",
        ]
    )
    tests = read_report(ourtester.path / "report.json")["tests"]
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in tests}
    assert outcomes["test_crash_expected"] == "xfailed"
    assert outcomes["test_hang_expected"] == "xfailed"
    assert outcomes["test_crash_is_no_value_error"] == "failed"


@pytest.mark.wide
def test_runxfail_makes_a_crash_a_failure(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(XFAILS)
    result = ourtester.runpytest("--runxfail", "-k", "test_crash_expected")
    result.assert_outcomes(failed=1)


def test_the_parents_fixtures_the_next_test_no_longer_needs_finish_after_a_marked_test(
    ourtester: pytest.Pytester,
) -> None:
    """As pytest's own protocol does after each test: a module's fixtures that ran in the
    parent finish once its last test, marked, is done, before the next module's first test;
    a fixture that fails to finish is that test's error at teardown."""
    ourtester.makeconftest(
        """
        import pytest

        FINISHED = []

        @pytest.fixture(scope="module")
        def resource(request):
            yield
            FINISHED.append(request.module.__name__)
            if request.module.__name__ == "test_b":
                raise RuntimeError("finishing-fails")
        """
    )
    ourtester.makepyfile(
        test_a="""
        import pytest

        def test_in_parent(resource):
            pass

        @pytest.mark.cudagraph_subprocess
        def test_marked():
            pass
        """,
        test_b="""
        import pytest
        from conftest import FINISHED

        def test_next(resource):
            assert FINISHED == ["test_a"]

        @pytest.mark.cudagraph_subprocess
        def test_marked_last():
            pass
        """,
        test_c="""
        from conftest import FINISHED

        def test_after():
            assert FINISHED == ["test_a", "test_b"]
        """,
    )
    result = ourtester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_marked_last*", "*finishing-fails*"])


def _plugin_the_zygote_cannot_import(ourtester: pytest.Pytester) -> Path:
    """An installed pytest plugin that imports in a test process but not in the zygote, whose
    environment (``TORCH_WARM_POOL=0``) its test processes do not have."""
    site = ourtester.mkdir("site")
    (site / "picky_plugin.py").write_text(
        "import os\n"
        "if os.environ.get('TORCH_WARM_POOL') == '0':\n"
        "    raise ImportError('not in this process')\n"
    )
    info = site / "cgg_picky-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cgg-picky\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\npicky = picky_plugin\n")
    return site


def test_a_preload_failure_is_said_once_and_the_tests_run(ourtester: pytest.Pytester) -> None:
    site = _plugin_the_zygote_cannot_import(ourtester)
    ourtester.makeconftest(
        """
        import sys
        import types

        # A module of pytest's own that only this session has: the zygote cannot load it.
        sys.modules["_pytest.cgg_only_here"] = types.ModuleType("_pytest.cgg_only_here")
        """
    )
    ourtester.makepyfile(
        f"""
        import sys
        import pytest

        pytestmark = pytest.mark.cudagraph_subprocess(env={{"PYTHONPATH": {str(site)!r}}})

        @pytest.mark.parametrize("n", range(4))
        def test_runs(n):
            assert "picky_plugin" in sys.modules
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(passed=4, warnings=2)
    output = result.stdout.str()
    for module, error in (
        ("_pytest.cgg_only_here", "ModuleNotFoundError"),
        ("picky_plugin", "ImportError('not in this process')"),
    ):
        notice = f"the zygote could not preload {module} ({error}"
        assert output.count(notice) == 1, output
    assert "each test process imports it itself" in output


WARNS_ON_IMPORT = """
import warnings

def deprecated(function):
    warnings.warn(UserWarning("deprecated-marker"))
    return function

class Model:
    @deprecated  # at import: a warning from a function, as torch.jit.script_method's
    def forward(self):
        pass

def old_call():
    warnings.warn(UserWarning("old-call-marker"))

def __getattr__(name):  # reached through importlib's frames: still the test's own warning
    if name == "old_name":
        warnings.warn(UserWarning("old-name-marker"))
        return 1
    raise AttributeError(name)
"""


def test_a_warning_an_import_raises_counts_as_it_counts_in_process(
    ourtester: pytest.Pytester,
) -> None:
    """Each test process imports the module afresh: its import's warning once a session, as
    in-process; a warning raised by each test's own call, once a test."""
    ourtester.makepyfile(
        warns_on_import=WARNS_ON_IMPORT,
        test_warns="""
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_imports_then_calls(n):
            import warns_on_import
            warns_on_import.old_call()
            from warns_on_import import old_name
        """,
    )
    in_process = ourtester.runpytest("-p", "no:cacheprovider")
    in_process.assert_outcomes(passed=3, warnings=7)
    isolated = ourtester.runpytest("-p", "no:cacheprovider", "--cudagraph-subprocess")
    isolated.assert_outcomes(passed=3, warnings=7)
