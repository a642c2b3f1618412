"""The torch bugs that tests here reproduce, and the releases that fixed them.

A test that reproduces one carries its ``skip_where_fixed`` mark: it runs where the installed torch
still has the bug and is skipped elsewhere with "torch X fixed this (what changed)". Each fix is
detected by the change itself where torch exposes it, so a backport counts too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import pytest


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
