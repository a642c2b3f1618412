from __future__ import annotations

import pytest

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
