"""pytest-cudagraph-guard: test torch.compile code that uses CUDA graphs, from any thread.

Importing this package never imports torch.
"""

from __future__ import annotations

from .config_guard import ConfigGuard, ConfigKeyError
from .leak_guard import CudagraphConfigLeakWarning

__all__ = ["ConfigGuard", "ConfigKeyError", "CudagraphConfigLeakWarning"]
