"""The terminal report: one screen by default (the tests worth a look, a few lines each, then one
summary block), every test under ``term-all``, identical lines of threads grouped, torch's
CPU-only skip said as such, and each file written named at the end."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pytest_cudagraph_guard._torch import cudagraph_settings
from pytest_cudagraph_guard.core.entries import ErrorEntry, SettingEntry
from pytest_cudagraph_guard.core.records import Activity, SkipEntry, TestRecord
from pytest_cudagraph_guard.report.entries import CPU_SKIP_TEXT, skip_text, thread_label
from pytest_cudagraph_guard.report.render import BLOCK_LINES, brief_lines, full_lines, summary_lines

from ..helpers import read_report

HUNDRED_TESTS = """
import pytest
import torch
import torch._inductor.config as config

@pytest.mark.parametrize("n", range(20))
def test_wrong_answer(n):
    assert n == -1

@pytest.mark.parametrize("n", range(4))
@pytest.mark.cudagraph_thread(threads=2)
def test_drafter_breaks(n):
    raise ValueError(f"drafter {n} broke")

@pytest.mark.parametrize("n", range(3))
@pytest.mark.cudagraph_thread(threads=2)
def test_captures_collide(n):
    raise torch.AcceleratorError("CUDA error: operation not permitted when stream is capturing")

@pytest.mark.parametrize("n", range(3))
def test_leaks(n):
    config.triton.cudagraphs = True

def test_reduce_overhead_on_cpu_tensors():
    torch._dynamo.reset()
    torch.compile(lambda x: torch.sin(x) + 1, mode="reduce-overhead")(torch.ones(4))

@pytest.mark.parametrize("n", range(9))
def test_compiles(n):
    torch._dynamo.reset()
    torch.compile(lambda x: x + n, backend="eager")(torch.ones(2))

@pytest.mark.parametrize("n", range(60))
def test_plain(n):
    pass
"""
EXPECTED_ERRORS = {"unclassified": 23, "thread-error": 8, "capture-conflict": 6}


def section(output: str) -> list[str]:
    """The lines of the cudagraph report, the files' lines after it included."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "= cudagraph report =" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("=="))
    return lines[start:end]


def heads(lines: list[str], nodeids: list[str]) -> dict[str, int]:
    return {n: sum(1 for line in lines if line.startswith(f"{n}  ")) for n in nodeids}


@pytest.mark.wide
def test_a_hundred_tests_with_thirty_failures_fit_one_screen(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=HUNDRED_TESTS)
    result = ourtester.runpytest(
        "--cudagraph-report", "--cudagraph-report=json:r.json", "--cudagraph-guard=fail"
    )
    result.assert_outcomes(passed=73, failed=27, errors=3)
    records = read_report(ourtester.path / "r.json")["tests"]
    failing = [r["nodeid"] for r in records if r["outcome"] in ("failed", "error")]
    assert len(records) == 100
    assert len(failing) == 30
    lines = section(result.stdout.str())
    assert len(lines) <= 120
    assert set(heads(lines, failing).values()) == {1}  # every failure, once
    shown = [n for n in (r["nodeid"] for r in records) if heads(lines, [n])[n]]
    assert len(shown) == 31  # the failures and the test whose CUDA graphs torch skipped
    assert "69 more tests with nothing to show" in lines
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_drafter_breaks[[]0]  failed  [[]thread x 2]",
            "  error x2 [[]cudagraph-thread-0..1]: ValueError: drafter 0 broke  "
            "(kind: thread-error)",
            "      hint: raised in thread 'cudagraph-thread-0..1', outside the main thread*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_leaks[[]0]  error  [[]main]",
            "  error [[]MainThread]: *",
            "  leak: torch._inductor.config.triton.cudagraphs: False -> True",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_reduce_overhead_on_cpu_tensors  passed  [[]main]",
            f"  skip [[]MainThread]: {CPU_SKIP_TEXT[:40]}*",
        ]
    )
    summary = lines[lines.index("-" * 35 + " summary " + "-" * 36) + 1 :]
    assert summary[:5] == [
        "100 tests: 70 passed, 27 failed, 3 error",
        "torch: 10 tests compiled (eager 9, inductor 1), 0 recorded, 0 replayed",
        "cudagraph skips: 1 in 1 test",
        f"  1x {CPU_SKIP_TEXT}",
        "errors: unclassified 23, thread-error 8, capture-conflict 6",
    ]
    assert summary[5:] == [
        "leaks: 3 in 3 tests (put back by the guard)",
        "cudagraph report: json written to r.json",
    ]
    totals = read_report(ourtester.path / "r.json")["summary"]
    assert totals["errors_by_kind"] == EXPECTED_ERRORS

    every = ourtester.runpytest(
        "--cudagraph-report=term-all", "--cudagraph-guard=fail", "-k", "not reduce_overhead"
    )
    every.assert_outcomes(passed=72, failed=27, errors=3)
    all_lines = section(every.stdout.str())
    nodeids = [r["nodeid"] for r in records if "reduce_overhead" not in r["nodeid"]]
    assert set(heads(all_lines, nodeids).values()) == {1}
    assert not any("with nothing to show" in line for line in all_lines)
    every.stdout.fnmatch_lines(
        [
            "test_suite.py::test_compiles[[]0]  passed  [[]main]",
            "  settings: triton.cudagraph_trees=True (default); triton.cudagraphs=False (default)*",
            "  activity: compiled 1 (eager 1), *",
        ]
    )


def record(**fields: Any) -> TestRecord:
    """A record as the report plugin builds it, with what a test sets."""
    activity = Activity(
        recorded=fields.pop("recorded", 0),
        replays=fields.pop("replays", 0),
        skips=fields.pop("skips", []),
        earlier_compiled=fields.pop("earlier_compiled", 0),
    )
    base: dict[str, Any] = {"outcome": "passed", "where": "main", "settings": {}, "env": {}}
    base.update(fields)
    return TestRecord(base.pop("nodeid", "test_x.py::test_x"), activity=activity, **base)


def drafter_skip(thread: str, devices: str = "") -> SkipEntry:
    return SkipEntry(thread, f"skipping cudagraphs due to multiple devices: {devices}")


def test_identical_lines_of_several_threads_are_grouped() -> None:
    skips = [drafter_skip(f"drafter-{i}") for i in (2, 0, 3, 1)]
    skips.append(drafter_skip("drafter-7", "device(type='cuda', index=0), device(type='cpu')"))
    errors = [
        ErrorEntry(
            f"cudagraph-thread-{i}",
            "AssertionError",
            "",
            kind="tls-missing",
            hint="call ensure_cudagraph_tls() first in this thread",
        )
        for i in range(3)
    ]
    errors.append(
        ErrorEntry(
            "drafter-9",
            "ConfigDivergence",
            "a function was compiled in thread 'drafter-9' with triton.cudagraphs=False",
            kind="config-divergence",
            hint=None,
        )
    )
    lines = full_lines(record(skips=skips, errors=errors, where="thread x 3"))
    text = words(lines)
    assert f"skip x4 [drafter-0..3]: {CPU_SKIP_TEXT}" in text
    assert "skip [drafter-7]: skipping cudagraphs due to multiple devices: device(" in text
    assert (
        "error x3 [cudagraph-thread-0..2]: AssertionError: (no message)  (kind: tls-missing)"
        in text
    )
    assert text.count("hint: call ensure_cudagraph_tls()") == 1
    assert (
        "finding [drafter-9]: ConfigDivergence: a function was compiled in thread 'drafter-9' "
        "with triton.cudagraphs=False  (kind: config-divergence)" in text
    )


THREADS_SET_THEIR_OWN = """
import pytest
import torch
import torch._inductor.config as config


def step(x):
    return x.sin() * 3


def test_sets_in_its_body():
    config.triton.cudagraphs = True
    try:
        torch.compile(step)(torch.ones(8))
    finally:
        config.triton.cudagraphs = False
"""


@pytest.mark.skipif(
    cudagraph_settings.config_is_process_wide(), reason="needs per-thread config (>= 2.12)"
)
def test_a_cut_finding_keeps_its_key_values_and_threads(ourtester: pytest.Pytester) -> None:
    """The threads set CUDA graphs on themselves, the main thread had them off: the one line of
    each format keeps the key, both values and the threads, and the hint is this direction's."""
    ourtester.makepyfile(test_own=THREADS_SET_THEIR_OWN)
    result = ourtester.runpytest(
        "--cudagraph-threads=2",
        "--cudagraph-report",
        "--cudagraph-report=md:r.md",
        "--cudagraph-report=json:r.json",
    )
    result.assert_outcomes(passed=1)
    block = words(section(result.stdout.str()))
    gist = "triton.cudagraphs=True in thread 'cudagraph-thread-0..1', False in the main thread"
    assert f"finding x2 [cudagraph-thread-0..1]: ConfigDivergence: {gist}" in block
    markdown = (ourtester.path / "r.md").read_text()
    assert f"[cudagraph-thread-0..1]: `ConfigDivergence: {gist}" in markdown
    [record] = read_report(ourtester.path / "r.json")["tests"]
    hints = {e["hint"] for e in record["errors"] if e["kind"] == "config-divergence"}
    assert len(hints) == 1
    [hint] = hints
    assert "the thread set triton.cudagraphs=True itself" in hint
    assert "sees the defaults" not in hint  # the other direction's


def test_a_finding_cut_to_one_line_keeps_its_gist() -> None:
    """However tight the block, a finding's line keeps its key and both values."""
    long_thread = "speculative-drafter-thread-with-a-long-name"
    errors = [
        ErrorEntry(
            f"{long_thread}-{i}",
            "ConfigDivergence",
            f"triton.cudagraph_trees=False in thread '{long_thread}-{i}', True in the main "
            f"thread at the test's start: {'words ' * 40}",
            kind="config-divergence",
            hint="h " * 200,
        )
        for i in range(2)
    ] + [ErrorEntry("MainThread", f"Error{i}", "x " * 100, kind=None, hint=None) for i in range(3)]
    lines = brief_lines(record(errors=errors))
    text = words(lines)
    assert (
        f"finding x2 [{long_thread}-0..1]: ConfigDivergence: triton.cudagraph_trees=False in "
        f"thread '{long_thread}-0..1', True in the main thread at the test's start"
    ) in text, lines


def words(lines: list[str]) -> str:
    """The text of wrapped lines."""
    return " ".join(line.strip() for line in lines)


@pytest.mark.parametrize(
    ("names", "label"),
    [
        (["drafter-2", "drafter-0", "drafter-1"], "drafter-0..2"),
        (["drafter-0", "drafter-2", "drafter-3"], "drafter-0, drafter-2..3"),
        (["MainThread", "autograd thread", "drafter-1"], "MainThread, autograd thread, drafter-1"),
        (["t-1", "t-1"], "t-1"),
    ],
)
def test_thread_labels(names: list[str], label: str) -> None:
    assert thread_label(names) == label


def test_torchs_cpu_only_skip_is_said_as_cpu_tensors() -> None:
    assert skip_text("skipping cudagraphs due to multiple devices: ") == CPU_SKIP_TEXT
    assert "CPU tensors" in CPU_SKIP_TEXT
    two = (
        "skipping cudagraphs due to multiple devices: "
        "device(type='cuda', index=0), device(type='cuda', index=1)"
    )
    assert skip_text(two) == two
    mutated = "skipping cudagraphs due to mutated inputs (1 instances). Found from : \n  File x.py"
    assert (
        skip_text(mutated)
        == "skipping cudagraphs due to mutated inputs (1 instances). Found from :"
    )


def test_one_value_per_setting_and_a_second_only_where_torch_acted_under_two() -> None:
    settings = {
        "triton.cudagraphs": SettingEntry(True, "test"),
        "triton.cudagraph_trees": SettingEntry(True, "test"),
    }
    at_end = {"triton.cudagraph_trees": SettingEntry(False, "default")}
    varied = record(
        settings=settings,
        settings_at_end=at_end,
        settings_varied={"triton.cudagraphs": [True, False, True]},
        skips=[drafter_skip("MainThread")],
    )
    lines = full_lines(varied)
    assert "triton.cudagraphs=True (test), also False" in lines[1]
    assert "triton.cudagraph_trees=True (test)" in lines[1]
    assert "at the end" not in "\n".join(lines)
    brief = brief_lines(varied)
    assert brief[1] == "  settings: triton.cudagraphs=True (test), also False"
    steady = record(settings=settings, settings_at_end=at_end, skips=[drafter_skip("MainThread")])
    assert not any("settings" in line for line in brief_lines(steady))


def test_a_block_stays_a_few_lines_and_counts_what_it_leaves_out() -> None:
    errors = [
        ErrorEntry(
            "MainThread",
            f"Error{i}",
            "torch said a lot\n" + "traceback line\n" * 50,
            kind="tls-corrupt",
            hint=f"hint number {i} " + "and what to do " * 30,
        )
        for i in range(6)
    ]
    lines = brief_lines(record(errors=errors, outcome="failed"))
    assert len(lines) <= BLOCK_LINES
    assert lines[-1] == "  … 3 more entries (--cudagraph-report=term-all shows them)"
    assert lines[1] == "  error [MainThread]: Error0: torch said a lot  (kind: tls-corrupt)"
    one = brief_lines(record(errors=errors[:1], outcome="failed"))
    assert len(one) == 4  # head, the entry, its hint cut to two lines
    assert one[2].startswith("      hint: hint number 0 and what to do")
    assert one[3].endswith("…")
    assert all(len(line) <= 100 for line in lines + one)


def test_findings_notes_and_what_ran_earlier_in_the_summary() -> None:
    rerecord = ErrorEntry(
        "drafter-0",
        "Rerecord",
        "step: re-recorded: static input data pointer changed (2 times)",
        kind="rerecord",
        hint="keep static inputs at one address",
    )
    slow = ErrorEntry(
        "MainThread", "SlowPath", "step: pending backward", kind="slow-path", hint=None
    )
    note = ErrorEntry(
        "MainThread",
        "KeyError",
        "report: the settings of this test: 'triton'",
        kind="plugin-error",
        hint=None,
    )
    records = [
        record(nodeid="t.py::a", errors=[rerecord, rerecord, slow], recorded=3, replays=9),
        record(nodeid="t.py::b", errors=[note], earlier_compiled=2, replays=4),
        record(nodeid="t.py::c", outcome="skipped"),
    ]
    lines = summary_lines(records)
    assert lines == [
        "3 tests: 2 passed, 1 skipped",
        "torch: 0 tests compiled, 1 recorded (3 graphs), 2 replayed (13 replays), "
        "1 ran graphs that an earlier test compiled",
        "re-records: 2 in 1 test",
        "  2x step: re-recorded: static input data pointer changed (2 times)",
        "errors: none",
        "findings: rerecord 2, slow-path 1",
        "plugin errors: plugin-error 1",
    ]
    brief = brief_lines(records[0])
    assert brief[1].startswith("  finding x2 [drafter-0]: Rerecord: step: re-recorded")
    assert words(brief[1:3]).endswith("(2 times) (kind: rerecord)")
    assert any(line.startswith("  finding [MainThread]: SlowPath") for line in brief)
    assert brief_lines(records[1])[1] == (
        "  note [MainThread]: KeyError: report: the settings of this test: 'triton'  "
        "(kind: plugin-error)"
    )


def test_each_file_is_named_at_the_end_or_why_it_could_not_be(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile("def test_one():\n    pass\n\ndef test_two():\n    assert False\n")
    result = ourtester.runpytest(
        "--cudagraph-report",
        "--cudagraph-report=json:out/r.json",
        "--cudagraph-report=md:/proc/no/r.md",
        "--cudagraph-report=md:out/r.md",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the tests' own
    lines = section(result.stdout.str())
    assert lines[-3:] == [
        "cudagraph report: json written to out/r.json",
        "cudagraph report: could not write md:/proc/no/r.md (No such file or directory)",
        "cudagraph report: md written to out/r.md",
    ]
    assert Path(ourtester.path / "out" / "r.md").read_text().startswith("# cudagraph report")
    alone = ourtester.runpytest("--cudagraph-report=json:r.json")
    alone.stdout.fnmatch_lines(["cudagraph report: json written to r.json", "*= 1 failed, *"])
    alone.stdout.no_fnmatch_line("*= cudagraph report =*")


def test_a_report_path_that_cannot_be_written_is_a_usage_error_before_any_test(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(test_ok="import os\ndef test_one():\n    os.mknod('ran')\n")
    for path, why in (
        ("md:test_ok.py/r.md", "test_ok.py is a file, not a folder"),
        ("json:test_ok.py/deep/r.json", "test_ok.py is a file, not a folder"),
        (f"json:{ourtester.path}", f"{ourtester.path} is a folder"),
    ):
        result = ourtester.runpytest(f"--cudagraph-report={path}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: --cudagraph-report: cannot write {path}: {why}"])
    assert not (ourtester.path / "ran").exists()


def test_a_report_file_given_twice_is_a_usage_error(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile("def test_one():\n    pass\n")
    result = ourtester.runpytest("--cudagraph-report=json:a.json", "--cudagraph-report=md:./a.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --cudagraph-report: a.json is given twice *"])


def test_json_and_md_without_a_path_write_their_default_files(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile("def test_one():\n    pass\n")
    result = ourtester.runpytest("--cudagraph-report", "json", "--cudagraph-report=md")
    assert result.ret == pytest.ExitCode.OK
    assert [line for line in result.outlines if line.startswith("cudagraph report:")] == [
        "cudagraph report: json written to cudagraph-report.json",
        "cudagraph report: md written to cudagraph-report.md",
    ]
    assert (ourtester.path / "cudagraph-report.json").read_text().startswith("{")
    help_text = ourtester.runpytest("--help").stdout.str()
    assert "cudagraph-report.json" in help_text


def test_markdown_shows_the_summary_and_the_tests_worth_a_look(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_thread(threads=2)
        def test_drafters_break():
            raise ValueError("broke")

        def test_plain(inductor_config):
            pass
        """
    )
    ourtester.runpytest("--cudagraph-report=md:r.md")
    text = (ourtester.path / "r.md").read_text()
    assert "## Summary\n\n- 2 tests: 1 passed, 1 failed\n" in text
    assert "- errors: thread-error 2\n" in text
    assert re.search(
        r"\| `test_markdown\w*\.py::test_drafters_break` \| failed \| thread x 2 \|", text
    )
    assert "test_plain`" not in text
    assert "1 more test with nothing to show" in text
    assert (
        "**thread-error** x2 [cudagraph-thread-0..1]: `ValueError: broke`\n"
        "  - raised in thread 'cudagraph-thread-0..1', outside the main thread" in text
    )
