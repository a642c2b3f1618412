"""The plugin's fixtures: guards over torch's config modules and a CUDA-graphs switch."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from . import _torch
from .core.config_guard import ConfigGuard
from .core.ours import ours
from .core.settings import cudagraph_switches

_INDUCTOR_CONFIG = _torch.Loss("inductor_config", "torch._inductor.config guarded and restored")
_DYNAMO_CONFIG = _torch.Loss("dynamo_config", "torch._dynamo.config guarded and restored")
_CUDAGRAPHS = _torch.Loss("cudagraphs", "CUDA graphs switched on and compiled state reset")


def _asked_for(fixture: str) -> Callable[[pytest.Item], str]:
    return lambda item: f"the {fixture} fixture"


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


# ``request`` tells the guard which test's record a failure goes to.


@pytest.fixture
@ours(_INDUCTOR_CONFIG, honours=_asked_for("inductor_config"))
def inductor_config(request: pytest.FixtureRequest) -> Iterator[ConfigGuard]:
    """``torch._inductor.config``, restored after the test whatever its outcome."""
    yield from _guarded(_torch.INDUCTOR_CONFIG)


@pytest.fixture
@ours(_DYNAMO_CONFIG, honours=_asked_for("dynamo_config"))
def dynamo_config(request: pytest.FixtureRequest) -> Iterator[ConfigGuard]:
    """``torch._dynamo.config``, restored after the test whatever its outcome."""
    yield from _guarded(_torch.DYNAMO_CONFIG)


@pytest.fixture
@ours(_CUDAGRAPHS, honours=_asked_for("cudagraphs"))
def cudagraphs(
    inductor_config: ConfigGuard, request: pytest.FixtureRequest
) -> Iterator[ConfigGuard]:
    """CUDA graphs on (with trees) for the test; compiled state is reset afterwards."""
    inductor_config.update(cudagraph_switches())
    try:
        yield inductor_config
    finally:
        _torch.reset_compiled_state()
