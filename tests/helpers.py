"""What the tests of several folders share: reading the JSON report an inner session wrote;
what they read of processes and files while a session runs, and a session run in a process of
its own; a stand-in for pytest's cache; torch 2.1-2.12's CUDAGraph Trees thread behaviour,
reproduced on torch 2.13 (``LEGACY_CONFTEST``); and the torch bugs that tests reproduce, with the
releases that fixed them.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


class PytestCache(dict[str, Any]):
    """pytest's cache (``config.cache``) as the plugin uses it: ``get`` and ``set``."""

    def set(self, key: str, value: object) -> None:
        self[key] = value


# Enough of the report to see what went wrong when a GPU run fails, where it cannot be rerun.
SHOWN_CHARACTERS = 8000


def read_report(path: Path) -> dict[str, Any]:
    """The report at ``path``, also printed (cut short) so that a failing test shows it."""
    document: dict[str, Any] = json.loads(path.read_text())
    print(json.dumps(document, indent=1)[:SHOWN_CHARACTERS])
    return document


def records_by_name(path: Path) -> dict[str, dict[str, Any]]:
    """Each test's record in the report at ``path`` by its node id without the file:
    ``test_x``, ``test_x[1]``, ``TestCase::test_x``."""
    return {name_of(r["nodeid"]): r for r in read_report(path)["tests"]}


def name_of(nodeid: str) -> str:
    """The node id without its file: ``test_a.py::TestCase::test_x`` gives ``TestCase::test_x``."""
    return nodeid.split("::", 1)[-1]


def before_the_summary(output: str) -> str:
    """A session's output up to its short test summary, which repeats each failure's message
    (whole where ``CI`` is set, as pytest does on CI)."""
    return output.split("short test summary info", 1)[0]


def read_back(path: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest_cudagraph_guard report [PATH] ARGS``, run as a user runs it."""
    given = [] if path is None else [str(path)]
    return subprocess.run(
        [sys.executable, "-m", "pytest_cudagraph_guard", "report", *given, *args],
        capture_output=True,
        text=True,
        check=False,
    )


# --- What the tests of test processes read of processes and files while a session runs, and
# a session run in a process of its own.


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def all_gone(pids: list[int], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(pid) for pid in pids)


def wait_for(path: Path, timeout: float = 60.0) -> str:
    """The text of ``path`` once it ends with a newline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout} s")


INTERRUPTIBLE_PYTEST = (
    "import signal, sys, pytest\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "sys.exit(pytest.main())\n"
)


def session_in_background(
    ourtester: pytest.Pytester, pids: Path, **env: str
) -> subprocess.Popen[bytes]:
    """A pytest session in its own process, its test told where to write its pids.

    SIGINT is given back its default handler: a shell that starts our own run in the background
    (`pytest ... &`) leaves it ignored, and Python keeps an inherited SIG_IGN.
    """
    return subprocess.Popen(
        [sys.executable, "-c", INTERRUPTIBLE_PYTEST],
        cwd=ourtester.path,
        env={**os.environ, "PIDS": str(pids), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


# --- torch 2.1-2.12's CUDAGraph Trees thread behaviour, reproduced faithfully on torch 2.13
#
# torch 2.13 creates per-thread state lazily and serializes captures; the CPU build used in CI
# cannot show the old failure. The conftest below installs the 2.1-2.12 ``get_obj`` (the same code)
# into the real ``torch._inductor.cudagraph_trees`` module, compiled under the module's own file
# name so that tracebacks show the same frames (``get_container`` -> ``get_obj`` in
# ``cudagraph_trees.py``), and removes 2.13's ``graph_capture_lock``.

LEGACY_GET_OBJ = """
def get_obj(local, attr_name):
    if hasattr(local, attr_name):
        return getattr(local, attr_name)
    else:
        assert torch._C._is_key_in_tls(attr_name)
        return torch._C._get_obj_in_tls(attr_name)
"""

LEGACY_CONFTEST = f"""
import pytest
import torch._inductor.cudagraph_trees as cgt

LEGACY_GET_OBJ = {LEGACY_GET_OBJ!r}


@pytest.fixture(autouse=True)
def torch_before_2_13():
    saved = {{name: cgt.__dict__[name] for name in ("get_obj", "graph_capture_lock")
             if name in cgt.__dict__}}
    exec(compile(LEGACY_GET_OBJ, cgt.__file__, "exec"), cgt.__dict__)
    cgt.__dict__.pop("graph_capture_lock", None)
    yield
    cgt.__dict__.update(saved)
"""


# --- The torch bugs that tests here reproduce, and the releases that fixed them
#
# A test that reproduces one carries its ``skip_where_fixed`` mark: it runs where the installed
# torch still has the bug and is skipped elsewhere with "torch X fixed this (what changed)". Each
# fix is detected by the change itself where torch exposes it, so a backport counts too.


@dataclass(frozen=True)
class TorchFix:
    """A torch bug's fix: the release that made it, what changed, how to see the change."""

    release: str
    change: str
    is_present: Callable[[], bool]

    @property
    def skip_where_fixed(self) -> pytest.MarkDecorator:
        return pytest.mark.skipif(
            self.is_present(), reason=f"torch {self.release} fixed this ({self.change})"
        )


def _has(module: str, name: str) -> Callable[[], bool]:
    return lambda: hasattr(importlib.import_module(module), name)


LAZY_THREAD_STATE = TorchFix(
    "2.13",
    "CUDAGraph Trees create a thread's state on first use, pytorch PR #184357: "
    "torch._inductor.cudagraph_trees._initialize_tls",
    _has("torch._inductor.cudagraph_trees", "_initialize_tls"),
)
FX_TRACING_PER_THREAD = TorchFix(
    "2.14",
    "FX's symbolic-tracing flag is per thread: torch.fx._symbolic_trace._is_fx_tracing_tls",
    _has("torch.fx._symbolic_trace", "_is_fx_tracing_tls"),
)
