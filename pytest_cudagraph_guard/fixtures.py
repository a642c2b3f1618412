"""The plugin's fixtures: guards over torch's config modules and a CUDA-graphs switch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import _torch
from .core.config_guard import ConfigGuard
from .core.settings import cudagraph_switches


def open_guard(module_name: str) -> ConfigGuard:
    """A guard over ``module_name``; skips the test where torch is not installed."""
    try:
        return ConfigGuard(_torch.import_config(module_name))
    except _torch.TorchNotInstalled:
        pytest.skip("torch is not installed")


def _guarded(module_name: str) -> Iterator[ConfigGuard]:
    guard = open_guard(module_name)
    try:
        yield guard
    finally:
        guard.restore()


@pytest.fixture
def inductor_config() -> Iterator[ConfigGuard]:
    """``torch._inductor.config``, restored after the test whatever its outcome."""
    yield from _guarded(_torch.INDUCTOR_CONFIG)


@pytest.fixture
def dynamo_config() -> Iterator[ConfigGuard]:
    """``torch._dynamo.config``, restored after the test whatever its outcome."""
    yield from _guarded(_torch.DYNAMO_CONFIG)


@pytest.fixture
def cudagraphs(inductor_config: ConfigGuard) -> Iterator[ConfigGuard]:
    """CUDA graphs on (with trees) for the test; compiled state is reset afterwards."""
    inductor_config.update(cudagraph_switches())
    try:
        yield inductor_config
    finally:
        _torch.reset_compiled_state()
