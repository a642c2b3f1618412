"""A session whose tests never compile loads neither dynamo nor inductor for its report: the
settings of a process that never loaded inductor (its defaults, under torch's variables) come
from pytest's cache once a session has read them. Real sessions, each a process of its own."""

from __future__ import annotations

import json

import pytest

# Which of inductor's and dynamo's modules the session ended with.
CONFTEST = """
import sys

def pytest_unconfigure(config):
    names = ("torch._dynamo", "torch._inductor.config")
    with open("loaded.txt", "w") as loaded:
        loaded.write(" ".join(name for name in names if name in sys.modules))
"""
NEVER_COMPILES = """
import torch

def test_op():
    assert torch.ones(2).sum() == 2
"""


def _run(tester: pytest.Pytester, report: str, *args: str) -> tuple[str, dict[str, object]]:
    """The modules the session loaded and its one record's settings."""
    tester.runpytest_subprocess(f"--cudagraph-report=json:{report}", *args).assert_outcomes(
        passed=1
    )
    [record] = json.loads((tester.path / report).read_text())["tests"]
    return (tester.path / "loaded.txt").read_text(), record["settings"]


@pytest.mark.wide
def test_a_session_that_never_compiles_reads_inductors_defaults_once(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in a user's shell: inductor's import writes its cache folder there (this session's
    # torch wrote it already), after the report looked its defaults up.
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    ourtester.makeconftest(CONFTEST)
    ourtester.makepyfile(test_never_compiles=NEVER_COMPILES)
    first_loaded, first = _run(ourtester, "first.json")
    assert first_loaded == "torch._dynamo torch._inductor.config"  # read once, then kept
    second_loaded, second = _run(ourtester, "second.json")
    assert second_loaded == ""
    assert list(second.items()) == list(first.items())  # the same, in the same order
    uncached_loaded, uncached = _run(ourtester, "uncached.json", "-p", "no:cacheprovider")
    assert uncached_loaded == first_loaded
    assert list(uncached.items()) == list(first.items())

    monkeypatch.setenv("TORCHINDUCTOR_CUDAGRAPHS", "1")  # other variables, other defaults
    changed_loaded, changed = _run(ourtester, "changed.json")
    assert changed_loaded == first_loaded
    assert changed["triton.cudagraphs"] == {"value": True, "source": "env:TORCHINDUCTOR_CUDAGRAPHS"}
