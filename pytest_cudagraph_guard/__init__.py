"""pytest-cudagraph-guard: test torch.compile code that uses CUDA graphs, from any thread.

Importing this package imports nothing else of the plugin's and never torch: each public name
loads its module when first used. PYTEST_DONT_REWRITE (:func:`_load_without_rewriting`).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ._torch.trees import ensure_cudagraph_tls
    from .core.warnings import CudagraphConfigLeakWarning, CudagraphGuardWarning
    from .diagnosis import Diagnosis, diagnose
    from .guard.config_guard import ConfigGuard, ConfigKeyError
    from .torch_settings import Setting, effective_settings

# Each public name and the module that defines it.
_MODULE_OF: Final = {
    "ensure_cudagraph_tls": "_torch.trees",
    "ConfigGuard": "guard.config_guard",
    "ConfigKeyError": "guard.config_guard",
    "CudagraphConfigLeakWarning": "core.warnings",
    "CudagraphGuardWarning": "core.warnings",
    "Diagnosis": "diagnosis",
    "diagnose": "diagnosis",
    "Setting": "torch_settings",
    "effective_settings": "torch_settings",
}

__all__ = [
    "ConfigGuard",
    "ConfigKeyError",
    "CudagraphConfigLeakWarning",
    "CudagraphGuardWarning",
    "Diagnosis",
    "Setting",
    "diagnose",
    "effective_settings",
    "ensure_cudagraph_tls",
]


def _load_without_rewriting() -> None:
    """Takes this package off pytest's list of modules to rewrite, which pytest makes of every
    plugin installed: the plugin's asserts only narrow types for mypy, and pytest's rewriting
    importer costs each module more than Python's own (about half of what loading the plugin
    cost a session that never uses it). Where pytest keeps that list otherwise, nothing changes."""
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        answers = getattr(finder, "_marked_for_rewrite_cache", None)
        if isinstance(marked, set) and isinstance(answers, dict):
            ours = {name for name in {*marked, *answers} if name.partition(".")[0] == __name__}
            marked -= ours
            for name in ours:
                answers.pop(name, None)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})


# A pytest that keeps its list otherwise must not stop the plugin from loading.
with contextlib.suppress(Exception):
    _load_without_rewriting()
