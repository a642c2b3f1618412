"""--cudagraph-report and --cudagraph-settings in real sessions, with real torch."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import torch._inductor.config

from pytest_cudagraph_guard._torch.cudagraph_settings import config_is_process_wide
from pytest_cudagraph_guard._torch.events import CUDAGRAPH_SWITCHES

from ..conftest import QUIET_INI
from ..helpers import LEGACY_CONFTEST, read_report, records_by_name

# A list-valued cudagraph key (not in every release): a read in a test copies its default.
LIST_KEY = "cudagraph_unsafe_unbacked_ops"
HAS_LIST_KEY = hasattr(torch._inductor.config, LIST_KEY)
SUITE = """
import threading
import pytest
import torch
import torch._inductor.cudagraph_trees as cgt

def test_uses_the_fixture(inductor_config):
    inductor_config["triton.cudagraph_trees"] = False
    if hasattr(torch._inductor.config, "cudagraph_unsafe_unbacked_ops"):
        assert inductor_config["cudagraph_unsafe_unbacked_ops"] == []  # a read copies it

def test_plain():
    pass

@pytest.mark.cudagraph_thread(threads=2)
def test_in_threads():
    pass

def test_own_thread_fails():
    def drafter():
        raise torch.AcceleratorError("CUDA error: operation not permitted when stream is capturing")
    thread = threading.Thread(target=drafter, name="drafter-7")
    thread.start()
    thread.join()
"""


def test_terminal_section_shows_the_tests_that_matter(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest("--cudagraph-report")
    result.assert_outcomes(passed=4, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*= cudagraph report =*",
            "test_suite.py::test_own_thread_fails  passed  [[]main]",
            "  error [[]drafter-7]: torch.AcceleratorError: CUDA error: operation not permitted*",
            "*(kind: capture-conflict)",
            "      hint: *",
            "*graph_capture_lock*",
            "3 more tests with nothing to show",
            "*- summary -*",
            "4 tests: 4 passed",
            "torch: 0 tests compiled, 0 recorded, 0 replayed",
            "errors: capture-conflict 1",
        ]
    )
    for quiet in ("test_plain", "test_in_threads", "test_uses_the_fixture"):
        result.stdout.no_fnmatch_line(f"test_suite.py::{quiet}*")
    result.stdout.no_fnmatch_line("*activity:*")  # term: the activity is in the summary
    every = ourtester.runpytest("--cudagraph-report=term-all")
    every.stdout.fnmatch_lines(
        [
            "test_suite.py::test_in_threads  passed  [[]thread x 2]",
            "  settings: triton.cudagraph_trees=True (test); triton.cudagraphs=True (test)*",
            "  activity: compiled 0, cudagraphed graphs 0, recorded 0, replays 0, skips 0",
            "test_suite.py::test_own_thread_fails  passed  [[]main]",
            "test_suite.py::test_plain  passed  [[]main]",
            "  settings: triton.cudagraph_trees=True (default); triton.cudagraphs=False (default)*",
            "  activity: compiled 0, cudagraphed graphs 0, recorded 0, replays 0, skips 0",
            "test_suite.py::test_uses_the_fixture  passed  [[]main]",
            "  settings: triton.cudagraph_trees=False (test)*",
        ]
    )


def test_json_and_markdown_files(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest(
        "--cudagraph-report=json:out/report.json", "--cudagraph-report=md:out/report.md"
    )
    result.assert_outcomes(passed=4)
    result.stdout.no_fnmatch_line("*= cudagraph report =*")
    document = read_report(ourtester.path / "out" / "report.json")
    assert document["schema"] == "pytest-cudagraph-guard/report/1"
    assert set(document["environment"]) >= {"python", "torch", "triton", "cuda", "driver", "gpus"}
    records = records_by_name(ourtester.path / "out" / "report.json")
    assert set(records) == {
        "test_uses_the_fixture",
        "test_in_threads",
        "test_own_thread_fails",
        "test_plain",
    }
    fixture = records["test_uses_the_fixture"]
    assert set(fixture) >= {"nodeid", "outcome", "where", "settings", "env", "activity", "errors"}
    assert fixture["settings"]["triton.cudagraph_trees"] == {"value": False, "source": "test"}
    assert fixture["settings"]["triton.cudagraphs"] == {"value": False, "source": "default"}
    assert "triton.cudagraph_skip_dynamic_graphs" in fixture["settings"]
    if HAS_LIST_KEY:
        assert fixture["settings"][LIST_KEY] == {"value": [], "source": "default"}
    error = records["test_own_thread_fails"]["errors"][0]
    assert set(error) == {"thread", "type", "message", "kind", "hint", "traceback"}
    assert (error["thread"], error["kind"]) == ("drafter-7", "capture-conflict")
    assert "in drafter" in error["traceback"]
    assert document["summary"]["errors_by_kind"] == {"capture-conflict": 1}
    markdown = (ourtester.path / "out" / "report.md").read_text()
    assert (
        "| `test_suite.py::test_own_thread_fails` | passed | main | False (default) | "
        "capture-conflict |" in markdown
    )
    assert "**capture-conflict** [drafter-7]: `torch.AcceleratorError: CUDA error:" in markdown
    assert "test_in_threads" not in markdown  # nothing to show: counted
    assert "3 more tests with nothing to show" in markdown
    assert list((ourtester.path / "out").iterdir()) == [
        ourtester.path / "out" / name for name in sorted(["report.json", "report.md"])
    ] or sorted(p.name for p in (ourtester.path / "out").iterdir()) == ["report.json", "report.md"]


def test_the_file_is_whole_after_an_interrupted_session(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        def test_first(inductor_config):
            pass

        def test_interrupted():
            raise KeyboardInterrupt
        """
    )
    recorder = ourtester.inline_run("--cudagraph-report=json:report.json", no_reraise_ctrlc=True)
    assert recorder.ret == pytest.ExitCode.INTERRUPTED
    assert [r["nodeid"] for r in read_report(ourtester.path / "report.json")["tests"]] == [
        "test_the_file_is_whole_after_an_interrupted_session.py::test_first"
    ]
    assert sorted(p.name for p in ourtester.path.iterdir() if "report" in p.name) == ["report.json"]


@pytest.mark.parametrize("value", ["xml:report.xml", "json:", "md: ", "terms", "yaml"])
def test_bad_formats_are_usage_errors_naming_the_value(
    ourtester: pytest.Pytester, value: str
) -> None:
    result = ourtester.runpytest(f"--cudagraph-report={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--cudagraph-report: unknown report format {value!r}*"])


def test_formats_from_the_ini_file(ourtester: pytest.Pytester) -> None:
    ourtester.makeini(QUIET_INI + "cudagraph_report = term json:from-ini.json\n")
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest()
    result.stdout.fnmatch_lines(["*= cudagraph report =*"])
    assert read_report(ourtester.path / "from-ini.json")["summary"]["tests"] == 4
    ourtester.makeini(QUIET_INI + "cudagraph_report = yaml\n")
    bad = ourtester.runpytest()
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*ini option cudagraph_report: unknown report format 'yaml'*"])


def test_records_reach_junit_xml(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    ourtester.runpytest("--cudagraph-report=json:r.json", "--junitxml=junit.xml")
    tree = ET.parse(ourtester.path / "junit.xml")
    properties = {
        case.get("name"): [p.get("name") for p in case.iter("property")]
        for case in tree.iter("testcase")
    }
    assert properties["test_in_threads"] == ["cudagraph"]
    assert properties["test_plain"] == ["cudagraph"]  # every test has its record


@pytest.mark.wide
def test_the_same_records_under_xdist(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    plain = ourtester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--cudagraph-report=json:a.json"
    )
    plain.assert_outcomes(passed=4)
    spread = ourtester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--cudagraph-report", "--cudagraph-report=json:b.json"
    )
    spread.assert_outcomes(passed=4)
    spread.stdout.fnmatch_lines(["*= cudagraph report =*", "4 tests: 4 passed"])
    first, second = read_report(ourtester.path / "a.json"), read_report(ourtester.path / "b.json")
    assert first["tests"] == second["tests"]
    assert first["summary"] == second["summary"]


def test_hooks_add_keys_and_receive_each_record(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest(
        """
        RECORDS = []

        def pytest_cudagraph_report_keys(config):
            return ["max_autotune"]

        def pytest_cudagraph_record(item, record):
            RECORDS.append((item.nodeid, record["outcome"]))
            record["team"] = "drafters"  # a key of the hook's own, kept in the report

        def pytest_unconfigure(config):
            print("RECORDS", sorted(RECORDS))
        """
    )
    ourtester.makepyfile(
        """
        def test_one(inductor_config):
            inductor_config["max_autotune"] = True
        """
    )
    result = ourtester.runpytest("-s", "--cudagraph-report=json:r.json")
    result.stdout.fnmatch_lines(
        ["RECORDS [[]('test_hooks_add_keys_and_receive_each_record.py::test_one', 'passed')]"]
    )
    record = read_report(ourtester.path / "r.json")["tests"][0]
    assert record["settings"]["max_autotune"] == {"value": True, "source": "test"}
    assert list(record)[-1] == "team"
    assert record["team"] == "drafters"


def test_tls_missing_in_the_report(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest(LEGACY_CONFTEST)
    ourtester.makepyfile(
        """
        import pytest
        import torch._inductor.cudagraph_trees as cgt

        @pytest.mark.cudagraph_thread(threads=2)
        def test_native():
            cgt.get_container(0)
        """
    )
    result = ourtester.runpytest("--cudagraph-report=json:r.json")
    result.assert_outcomes(failed=1)
    errors = read_report(ourtester.path / "r.json")["tests"][0]["errors"]
    assert [(e["thread"], e["type"], e["message"], e["kind"]) for e in errors] == [
        ("cudagraph-thread-0", "AssertionError", "", "tls-missing"),
        ("cudagraph-thread-1", "AssertionError", "", "tls-missing"),
    ]
    assert "ensure_cudagraph_tls()" in errors[0]["hint"]


def test_compiles_skips_and_config_divergence(ourtester: pytest.Pytester) -> None:
    """A reduce-overhead function on CPU tensors skips cudagraphs, with torch's reason; a drafter
    thread compiles without the main thread's settings (per-thread config, torch >= 2.12)."""
    ourtester.makepyfile(
        test_pipeline="""
        import threading
        import torch

        def step(x):
            return torch.sin(x) * 2 + torch.cos(x)

        def test_reduce_overhead_on_cpu_tensors():
            torch.compile(step, mode="reduce-overhead")(torch.ones(8))

        def test_drafter_thread(cudagraphs):
            thread = threading.Thread(
                target=lambda: torch.compile(step)(torch.ones(8)), name="drafter-0"
            )
            thread.start()
            thread.join()
        """
    )
    result = ourtester.runpytest(
        "--cudagraph-report", "--cudagraph-report=json:r.json", "--cudagraph-report=md:r.md"
    )
    result.assert_outcomes(passed=2)
    records = records_by_name(ourtester.path / "r.json")
    # The test's settings are those the fixture set where its body ran, whatever the thread it
    # started compiled under (that is the finding's).
    assert {k: records["test_drafter_thread"]["settings"][k] for k in CUDAGRAPH_SWITCHES} == {
        k: {"value": True, "source": "test"} for k in CUDAGRAPH_SWITCHES
    }
    assert (
        "| `test_pipeline.py::test_drafter_thread` | passed | main | True (test) |"
        in (ourtester.path / "r.md").read_text()
    )
    skipped = records["test_reduce_overhead_on_cpu_tensors"]
    assert skipped["settings"]["triton.cudagraphs"] == {"value": True, "source": "compile"}
    compiled = skipped["activity"]["compiled"]
    assert [(c["thread"], c["options"], c["cudagraphs"]) for c in compiled] == [
        ("MainThread", {"triton.cudagraphs": True}, True)
    ]
    skips = skipped["activity"]["skips"]
    assert len(skips) == 1
    assert skips[0]["reason"].startswith("skipping cudagraphs due to")
    drafter = records["test_drafter_thread"]
    if config_is_process_wide():  # torch <= 2.11: the thread compiles with the test's settings
        assert drafter["errors"] == []
        assert [c["cudagraphs"] for c in drafter["activity"]["compiled"]] == [True]
    else:
        assert [(e["thread"], e["kind"]) for e in drafter["errors"]] == [
            ("drafter-0", "config-divergence")
        ]
        assert "triton.cudagraphs=False" in drafter["errors"][0]["message"]
        assert "contextvars.copy_context().run" in drafter["errors"][0]["hint"]
    result.stdout.fnmatch_lines(
        ["  skip [[]MainThread]: skipping cudagraphs: the graph runs on CPU*"]
    )


@pytest.mark.wide
def test_settings_option_prints_and_runs_no_test(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CUDAGRAPH_TREES", "0")
    ourtester.makepyfile("def test_never():\n    raise AssertionError('must not run')\n")
    result = ourtester.runpytest_subprocess("--cudagraph-settings", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "cudagraph settings of torch._inductor.config (value, source):",
            "  triton.cudagraph_trees * True * default",
            "  triton.cudagraphs * False * default",
            "environment variables:",
            "  TORCHINDUCTOR_CUDAGRAPH_TREES=0  (not read by this torch release)",
            "versions:",
            "  torch: 2.*",
            "GPUs: *",
            "CUDAGraph Trees thread state: *",
        ]
    )
    result.stdout.no_fnmatch_line("*must not run*")
    # The folder torch sets for its cache by default is not the user's.
    result.stdout.no_fnmatch_line("*TORCHINDUCTOR_CACHE_DIR*")


def test_settings_sources_from_the_environment(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CUDAGRAPHS", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CUDAGRAPH_OR_ERROR", "0")
    result = ourtester.runpytest_subprocess("--cudagraph-settings", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "  triton.cudagraph_or_error * False * env:TORCHINDUCTOR_CUDAGRAPH_OR_ERROR",
            "  triton.cudagraphs * True * env:TORCHINDUCTOR_CUDAGRAPHS",
            "  TORCHINDUCTOR_CUDAGRAPHS=1  (read by torch._inductor.config)",
        ]
    )


@pytest.mark.wide
def test_reporting_imports_nothing_by_itself(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest(
        """
        import sys
        import torch._inductor.config

        WATCHED = ("torch._inductor.compile_fx", "torch._inductor.cudagraph_trees")

        def pytest_unconfigure(config):
            print("IMPORTED", [name for name in WATCHED if name in sys.modules])
        """
    )
    ourtester.makepyfile("def test_plain():\n    pass\n")
    result = ourtester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "--cudagraph-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["IMPORTED []"])


def test_effective_settings_api() -> None:
    import contextvars

    import torch._inductor.config as ic

    import pytest_cudagraph_guard as g

    assert g.effective_settings()["triton.cudagraphs"] == g.Setting(False, "default")

    def in_a_thread_context() -> object:
        ic.triton.cudagraphs = True
        return g.effective_settings(["max_autotune"])

    found = contextvars.copy_context().run(in_a_thread_context)
    assert found["triton.cudagraphs"] == g.Setting(True, "test")
    assert found["max_autotune"] == g.Setting(False, "default")


def test_a_report_without_torch(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest('import sys\nsys.modules["torch"] = None\n')
    ourtester.makepyfile("def test_guarded(inductor_config):\n    pass\n")
    result = ourtester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--cudagraph-report=json:r.json", "--cudagraph-report"
    )
    result.assert_outcomes(skipped=1)
    document = read_report(ourtester.path / "r.json")
    assert document["environment"]["torch"] is None
    assert set(document["environment"]) == {
        "python",
        "torch",
        "triton",
        "cuda",
        "driver",
        "gpus",
        "options",
    }
    assert [(r["outcome"], r["settings"]) for r in document["tests"]] == [("skipped", {})]


def test_a_test_path_taken_for_the_format_is_explained(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_one="def test_one():\n    pass\n")
    result = ourtester.runpytest("--cudagraph-report", "test_one.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*unknown report format 'test_one.py'*looks like a test path*--cudagraph-report=term*"]
    )
