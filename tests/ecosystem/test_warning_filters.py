"""Strict warning filters: the plugin's own imports of torch, a test process's start-up and the
plugin's notices are never the user's; the user's own warnings keep the user's filters."""

from __future__ import annotations

import pytest

from ..fault_guard.faults import make_faults
from .conftest import STRICT_INI, counts, no_internal_error

pytestmark = pytest.mark.wide  # every test here: see tests/conftest.py

READS_CONFIG = """
import torch._inductor.config as config


def test_one():
    assert isinstance(config.triton.cudagraphs, bool)


def test_two():
    assert isinstance(config.triton.cudagraph_trees, bool)
"""
WARNS = """
import warnings
import pytest


def test_warns():
    warnings.warn(UserWarning("the user's own"))


@pytest.mark.cudagraph_subprocess
def test_warns_in_its_process():
    warnings.warn(UserWarning("the user's own"))


@pytest.mark.cudagraph_thread(threads=2)
def test_warns_in_threads():
    warnings.warn(UserWarning("the user's own"))
"""
FEATURES = [
    pytest.param(["--cudagraph-threads=1"], id="threads"),
    pytest.param(["--cudagraph-subprocess"], id="subprocess"),
    pytest.param(["--cudagraph-on", "--cudagraph-report"], id="on-report"),
]
STRICT = ["ini", "-W", "PYTHONWARNINGS"]


def _strictly(eco: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str) -> list[str]:
    """The arguments for a session whose warnings are errors, ``how`` the user says so."""
    if how == "ini":
        eco.makeini(STRICT_INI)
        return []
    if how == "-W":
        return ["-W", "error", "-W", "ignore:Failed to initialize NumPy:UserWarning"]
    monkeypatch.setenv("PYTHONWARNINGS", "error,ignore:Failed to initialize NumPy:UserWarning")
    return []


@pytest.mark.parametrize("how", STRICT)
@pytest.mark.parametrize("features", FEATURES)
def test_a_correct_suite_keeps_its_outcomes_under_strict_filters(
    eco: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str, features: list[str]
) -> None:
    eco.makepyfile(READS_CONFIG)
    # A fresh interpreter: the plugin's imports of torch are its first, as in a user's run.
    result = eco.runpytest_subprocess(*_strictly(eco, monkeypatch, how), *features)
    no_internal_error(result)
    assert counts(result) == {"passed": 2}


def test_the_same_warning_count_as_a_plain_run(eco: pytest.Pytester) -> None:
    eco.makepyfile(READS_CONFIG)
    plain = counts(eco.runpytest_subprocess())
    assert plain == {"passed": 2}
    for features in FEATURES:
        assert counts(eco.runpytest_subprocess(*features.values[0])) == plain, features.id


def test_the_users_own_warnings_keep_the_users_filters(eco: pytest.Pytester) -> None:
    eco.makepyfile(WARNS)
    shown = eco.runpytest()
    # Both threads warn from one line: Python shows it once, as for two calls in one thread.
    assert counts(shown) == {"passed": 3, "warnings": 3}
    eco.makeini(STRICT_INI)
    failed = eco.runpytest()
    no_internal_error(failed)
    assert counts(failed) == {"failed": 3}
    failed.stdout.fnmatch_lines_random(["*UserWarning: the user's own*"])


def test_the_plugins_notices_reach_the_summary_and_fail_no_test(
    eco: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    eco.makeini(STRICT_INI)
    eco.makepyfile(READS_CONFIG)
    make_faults(eco, monkeypatch, "guard.plugin.LeakGuard.pytest_runtest_teardown")
    result = eco.runpytest()
    no_internal_error(result)
    assert counts(result) == {"passed": 2, "warnings": 1}
    result.stdout.fnmatch_lines(["*CudagraphGuardWarning: cudagraph_guard internal error*"])
