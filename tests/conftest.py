from __future__ import annotations

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
import torch._inductor.runtime.cache_dir_utils

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


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester's own fixture, its sessions started without pytest-randomly's shuffle and
    pytest-rerunfailures's socket server where they are installed (the test extra has them for
    tests/ecosystem; a session asks for one with ``-p randomly``, ``-p rerunfailures``).
    pytester drops ``PYTEST_ADDOPTS`` as it starts: it is set again here."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly -p no:rerunfailures")
    return pytester
