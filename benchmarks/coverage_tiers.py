"""The package's line coverage by the whole suite and by the README's test command, from one run.

The suite runs under coverage.py with every process measured: pytester's sessions, zygotes, test
processes (forked, ended by ``os._exit``) and xdist workers. Each line is recorded with the test
that ran it (``coverage_by_test/``: its node id is the coverage context of every process started
while it runs), so the coverage of any set of tests is read from the same data.

    python benchmarks/coverage_tiers.py run            # the suite under coverage (~30 min, 2 cores)
    python benchmarks/coverage_tiers.py check          # the whole suite against -m "not wide"
    python benchmarks/coverage_tiers.py run --data .coverage-new -- tests/report/test_activity.py
    python benchmarks/coverage_tiers.py check --data .coverage-tiers --data .coverage-new

``check`` fails where a line of the package runs only in tests marked ``wide`` (the README's test
command leaves them out): it names each such line and the wide tests that run it. A test that
fails under coverage still counts for the lines it ran.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "coverage_by_test"
PACKAGE = ROOT / "pytest_cudagraph_guard"
DEFAULT_DATA = ROOT / ".coverage-tiers"
# Where a line ran before any test began (an xdist worker's start, the conftests' imports).
NO_TEST = ""


def run(data: Path, pytest_args: list[str]) -> int:
    data = data.resolve()  # coverage runs in the project's root
    data.mkdir(parents=True, exist_ok=True)
    for old in data.glob(".coverage*"):
        old.unlink()
    rc = data / "coveragerc"
    rc.write_text(
        "[run]\n"
        f"source = {PACKAGE}\n"
        "parallel = true\n"
        "patch = subprocess, _exit, fork\n"
        f"data_file = {data / '.coverage'}\n"
    )
    paths = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    command = [sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest"]
    command += ["-n", "auto", "-p", "coverage_by_test", "-p", "no:cacheprovider", *pytest_args]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


def lines_by_test(folders: list[Path]) -> dict[str, set[tuple[str, int]]]:
    """Each test's lines of the package (and :data:`NO_TEST`'s), from every data file of the
    ``folders`` (a later run of a few tests adds to a run of the whole suite)."""
    from coverage.data import CoverageData

    found: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for path in sorted(path for data in folders for path in data.glob(".coverage.*")):
        measured = CoverageData(str(path))
        measured.read()
        for source in measured.measured_files():
            for line, tests in (measured.contexts_by_lineno(source) or {}).items():
                for test in tests or [NO_TEST]:
                    found[test].add((source, line))
    return found


def marked(marker: str) -> set[str]:
    """The node ids of the suite's tests that carry ``marker`` (an error where none do, or the
    suite cannot be collected: an empty set would pass every check)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marker, "-p", "no:xdist"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {line.strip() for line in listed.splitlines() if "::" in line}
    if not found:
        raise SystemExit(f"no test is marked {marker!r}")
    return found


def statements() -> set[tuple[str, int]]:
    """The package's statements, as coverage.py counts them: the lines a report could show."""
    import coverage

    counting = coverage.Coverage(data_file=None, config_file=False)
    return {
        (str(path), line)
        for path in PACKAGE.rglob("*.py")
        for line in counting.analysis2(str(path))[1]
    }


def check(folders: list[Path], marker: str) -> int:
    by_test = lines_by_test(folders)
    if not by_test:
        print(f"no coverage data in {folders}: run `coverage_tiers.py run`", file=sys.stderr)
        return 2
    wide = marked(marker)
    total = statements()
    everything = total & set().union(*by_test.values())
    kept = total & set().union(*(lines for test, lines in by_test.items() if test not in wide))
    print(f"statements of the package: {len(total)}")
    print(f"the whole suite: {len(everything)} ({100 * len(everything) / len(total):.1f} %)")
    print(
        f'-m "not {marker}" ({len(set(by_test) - wide - {NO_TEST})} tests): {len(kept)} '
        f"({100 * len(kept) / len(total):.1f} %)"
    )
    only_wide = sorted(everything - kept)
    for source, line in only_wide:
        runners = sorted(t for t in wide if (source, line) in by_test.get(t, ()))
        print(f"  only -m {marker}: {os.path.relpath(source, ROOT)}:{line}  {runners[:3]}")
    return 1 if only_wide else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "check"])
    parser.add_argument(
        "--data", type=Path, action="append", help=f"where the data goes (default {DEFAULT_DATA})"
    )
    parser.add_argument("--marker", default="wide", help="the tier the README's command leaves out")
    parser.add_argument("pytest_args", nargs="*", help="after --: more arguments for pytest")
    args = parser.parse_intermixed_args()
    folders = args.data or [DEFAULT_DATA]
    if args.command == "run":
        return run(folders[0], args.pytest_args)
    return check(folders, args.marker)


if __name__ == "__main__":
    raise SystemExit(main())
