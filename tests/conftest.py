from __future__ import annotations

import contextlib
import importlib
import os
from importlib.metadata import entry_points

import pytest

# pytester's sessions load the plugin through its entry point. From a checkout on PYTHONPATH
# (the GPU machine: `PYTHONPATH=$PWD python3 -m pytest -p pytest_cudagraph_guard.plugin`), where
# none is installed, `-p` reaches this session only: the sessions it starts load it from here.
if not any(ep.name == "cudagraph_guard" for ep in entry_points(group="pytest11")):
    os.environ.setdefault("PYTEST_PLUGINS", "pytest_cudagraph_guard.plugin")

# pytester's in-process runs drop every module that a run imported when it ends, and torch's
# extension modules cannot be imported twice in one process: import what the inner sessions use.
import torch
import torch._dynamo
import torch._inductor.config
import torch._inductor.cudagraph_trees

with contextlib.suppress(ImportError):  # from torch 2.3
    importlib.import_module("torch._inductor.runtime.cache_dir_utils")

# Compiling once loads the rest of dynamo's modules (backend registries among them).
torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))
torch._dynamo.reset()

# torch's CPU build warns at import when numpy is missing; that is not what these tests count.
QUIET_INI = "[pytest]\nfilterwarnings = ignore:Failed to initialize NumPy:UserWarning\n"


@pytest.fixture
def ourtester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester whose sessions get a clean ini, so only the plugin's defaults apply."""
    pytester.makeini(QUIET_INI)
    return pytester


# The plugins the test extra pins for tests/ecosystem. Inner sessions run as in a clean
# environment unless a test asks for one (``-p hypothesispytest``): hypothesis's plugin alone
# adds seconds to each session's start on a busy machine, pytest-randomly would shuffle the
# inner tests, and pytest-rerunfailures opens a socket server.
INSTALLED_FOR_ECOSYSTEM = (
    "randomly",
    "rerunfailures",
    "hypothesispytest",
    "pytest_cov",
    "asyncio",
    "timeout",
    "pytest_mock",
    "repeat",
)
CLEAN_SESSIONS = " ".join(f"-p no:{name}" for name in INSTALLED_FOR_ECOSYSTEM)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester's own fixture, its sessions started without the plugins installed for
    tests/ecosystem (:data:`INSTALLED_FOR_ECOSYSTEM`). pytester drops ``PYTEST_ADDOPTS`` as it
    starts: it is set again here."""
    monkeypatch.setenv("PYTEST_ADDOPTS", CLEAN_SESSIONS)
    return pytester


# The test pyramid's tiers: ``-m "not processes"`` runs the fast one, tests of functions and
# objects in this process; the rest start what only processes show: pytest sessions (pytester's,
# which start zygotes, test processes and xdist workers), forks and fresh interpreters. Of those,
# the ``wide`` ones show behaviours again beside other plugins, settings and xdist, or at scale:
# the README's test command (``-m "not wide"``) leaves them out, and CI runs them too (``-m
# wide``). Mark a test wide only where every line of the package it runs is run by a test the
# README's command keeps: ``python benchmarks/coverage_tiers.py run``, then ``check``.
PROCESSES_MARKER = "processes"
WIDE_MARKER = "wide"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{PROCESSES_MARKER}: the test starts pytest sessions or processes (given to every test "
        "that uses pytester; run the other tier alone with -m 'not processes')",
    )
    config.addinivalue_line(
        "markers",
        f"{WIDE_MARKER}: a behaviour shown again beside other plugins, settings or xdist, or at "
        "scale (the README's test command leaves it out: -m 'not wide'; CI runs -m wide too)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "pytester" in getattr(item, "fixturenames", ()):
            item.add_marker(PROCESSES_MARKER)
