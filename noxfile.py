"""Release matrix: the suite on each torch release supported, and the plugin without torch.

    nox -s tests                       # the three runs below, on Python 3.11
    nox -s "tests(torch='2.13.0')"     # the README's test run
    nox -s "tests(torch='2.14.1')"     # a CUDA build, about 5.5 GB (this machine has it on disk)
    nox -s "tests(torch='2.15.0', pytest='oldest')"  # the newest release, a CUDA build, about
                                       # 3 GB of downloads, beside the oldest pytest allowed
    nox -s boundaries                  # the tests at torch's and pytest's boundaries
                                       # (BOUNDARY_TESTS) on torch 2.15.0 beside the oldest
                                       # pytest: before a release (CI has no time for it)
    nox -s notorch                     # Python 3.10, 3.12 and 3.13, torch not installed
    nox -s notorch-3.12
    nox -s releases                    # the oldest torch claimed and each patch table boundary;
                                       # GBs each, not in CI (results: docs/performance.md)
    nox -s latest                      # the newest torch on the index; a download of GBs, not in CI

Arguments after ``--`` go to pytest: ``nox -s "tests(torch='2.14.1')" -- -k threads``.
Python versions are found on PATH; where pyenv manages them, the newest installed patch of each
version this file needs is activated for nox's own lookups (``PYENV_VERSION``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import nox
import tomllib

TESTS_PYTHON = "3.11"
NOTORCH_PYTHONS = ["3.10", "3.12", "3.13"]
NEWEST_TORCH = "2.15.0"  # the newest release supported
# Each torch release supported once; the oldest pytest allowed beside the newest.
TESTS_MATRIX = [
    nox.param("2.13.0", False, id="torch='2.13.0'"),
    nox.param("2.14.1", False, id="torch='2.14.1'"),
    nox.param(NEWEST_TORCH, True, id=f"torch='{NEWEST_TORCH}', pytest='oldest'"),
]
# The oldest release pyproject claims (2.9, where the patch table's 2.9+ rows start), and the
# last before per-thread CUDAGraph Trees state (the table's rows up to 2.12).
CLAIMED_RELEASES = ["2.9.1", "2.12.1"]
NOTORCH_TESTS = "tests/notorch"
# What reads torch's and pytest's internals most: torch's that the plugin patches and reads
# (the patch table, the threads' per-thread state, the config guard, the report's findings and
# settings), its hooks in pytest's (each failing in turn, the options, JUnit's properties), a
# test process's own pytest session and the wire that carries its reports back, and a crash's
# record (pytest's xfail marks and fault handler): these on the newest torch beside the oldest
# pytest, before a release (CI runs the whole suite on the README's torch and pytest); left to
# that: the zygote and its spares, the devices, an xdist worker's crash and core dumps, the
# report's files and formats, the suite options.
BOUNDARY_TESTS = [
    "tests/_torch",
    "tests/threads",
    "tests/guard",
    "tests/fault_guard",
    "tests/core/test_options.py",
    "tests/crash/test_crash.py",
    "tests/crash/test_journal.py",
    "tests/isolation/test_subprocess_marker.py",
    "tests/isolation/test_wire.py",
    *(
        f"tests/report/test_{name}.py"
        for name in (
            "order_independence",
            "settings_store",
            "settings_as_acted",
            "records",
            "kinds",
            "terminal",
            "wire",
            "json_boundary",
            "uses_plugin",
            "junit",
        )
    ),
]
# This machine's pip configuration caps torch through a constraints file; an empty one lifts it.
NO_CONSTRAINTS = {"PIP_CONSTRAINT": os.devnull}

nox.options.sessions = ["tests", "notorch"]
nox.options.download_python = "never"


def _pyenv_version_names(wanted: list[str]) -> str | None:
    """``PYENV_VERSION`` that keeps the active versions and adds the newest installed patch of
    each wanted ``X.Y``; None where pyenv is absent."""
    if shutil.which("pyenv") is None:
        return None
    active = os.environ.get("PYENV_VERSION") or _pyenv("version-name")
    installed = _pyenv("versions", "--bare").split()
    names = active.split(":")
    for minor in wanted:
        patches = [v for v in installed if re.fullmatch(rf"{re.escape(minor)}\.\d+", v)]
        if patches:
            names.append(max(patches, key=lambda v: int(v.rsplit(".", 1)[1])))
    return ":".join(dict.fromkeys(names))


def _pyenv(*args: str) -> str:
    return subprocess.run(
        ["pyenv", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    return project


def _test_runner() -> list[str]:
    """The ``test`` extra less the plugins pinned there for tests/ecosystem (``==``), which the
    release matrix does not run (they need a newer pytest than the oldest one allowed, and what
    they test does not change with torch)."""
    return [r for r in _project()["optional-dependencies"]["test"] if "==" not in r]


def _dependencies_without_torch() -> list[str]:
    """The package's dependencies and its test runner, torch left out."""
    requirements = [*_project()["dependencies"], *_test_runner()]
    return [r for r in requirements if re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] != "torch"]


def _oldest_pytest() -> str:
    """The oldest pytest release series the package allows: ``pytest>=8`` gives ``8.0.*``."""
    floor = next(
        match[1]
        for requirement in _project()["dependencies"]
        if (match := re.fullmatch(r"pytest\s*>=\s*(\d+(?:\.\d+)?)(?:\.\d+)*", requirement))
    )
    return f"{floor}.*" if "." in floor else f"{floor}.0.*"


def _run_suite(session: nox.Session, *tests: str) -> None:
    """``tests``, else the suite less tests/ecosystem: the plugins beside this one are tested in
    the README's run (on torch 2.13.0), which CI runs; what they test does not change with
    torch."""
    chosen = tests or ("--ignore=tests/ecosystem",)
    session.run("python", "-m", "pytest", "-n", "auto", *chosen, *session.posargs)


@nox.session(python=TESTS_PYTHON)
@nox.parametrize(("torch", "oldest_pytest"), TESTS_MATRIX)
def tests(session: nox.Session, torch: str, oldest_pytest: bool) -> None:
    """The suite on one torch release (and, beside one of them, the oldest pytest allowed)."""
    _install(session, torch, oldest_pytest)
    _run_suite(session)


def _install(session: nox.Session, torch: str, oldest_pytest: bool) -> None:
    """The package and its test runner beside ``torch``, and the oldest pytest allowed where
    asked for."""
    pytest = [f"pytest=={_oldest_pytest()}"] if oldest_pytest else []
    session.install(f"torch=={torch}", *pytest, "-e", ".", *_test_runner(), env=NO_CONSTRAINTS)


@nox.session(python=TESTS_PYTHON)
def boundaries(session: nox.Session) -> None:
    """:data:`BOUNDARY_TESTS` on the newest torch supported beside the oldest pytest allowed:
    before a release, and where the patch table or a pytest internal the plugin reads changes."""
    _install(session, NEWEST_TORCH, oldest_pytest=True)
    _run_suite(session, *BOUNDARY_TESTS)


@nox.session(python=TESTS_PYTHON)
@nox.parametrize("torch", CLAIMED_RELEASES)
def releases(session: nox.Session, torch: str) -> None:
    """The suite on a release ``tests`` does not run: the oldest claimed, each patch boundary."""
    # Inductor before 2.4 imports pkg_resources, which new virtual environments lack.
    tools = ["setuptools<81"]
    session.install(f"torch=={torch}", *tools, "-e", ".", *_test_runner(), env=NO_CONSTRAINTS)
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")
    _run_suite(session)


@nox.session(python=NOTORCH_PYTHONS)
def notorch(session: nox.Session) -> None:
    """The plugin installed with its dependencies but not torch: it loads and skips its users."""
    session.install("--no-deps", ".")
    session.install(*_dependencies_without_torch())
    session.run("python", "-m", "pytest", f"--confcutdir={NOTORCH_TESTS}", NOTORCH_TESTS)


@nox.session(python=TESTS_PYTHON)
def latest(session: nox.Session) -> None:
    """The suite on the newest torch on the index, this machine's torch cap lifted."""
    session.install("--upgrade", "torch", "-e", ".[test]", env=NO_CONSTRAINTS)
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")
    _run_suite(session)


if (_pyenv_versions := _pyenv_version_names([TESTS_PYTHON, *NOTORCH_PYTHONS])) is not None:
    os.environ["PYENV_VERSION"] = _pyenv_versions
