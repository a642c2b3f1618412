"""The plugin's fixtures: guards over torch's config modules and a CUDA-graphs switch.

Declared when the plugin loads; what they do (the config guard, torch's config modules) loads
when a test asks for one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from . import _torch
from .core.ours import ours

if TYPE_CHECKING:
    from .core.config_guard import ConfigGuard

_INDUCTOR_CONFIG = _torch.Loss("inductor_config", "torch._inductor.config guarded and restored")
_DYNAMO_CONFIG = _torch.Loss("dynamo_config", "torch._dynamo.config guarded and restored")
_CUDAGRAPHS = _torch.Loss("cudagraphs", "CUDA graphs switched on and compiled state reset")


def _asked_for(fixture: str) -> Callable[[pytest.Item], str]:
    return lambda item: f"the {fixture} fixture"


def _guarded(module_name: str) -> Iterator[ConfigGuard]:
    """A guard over ``module_name``, restored after the test; skips the test where torch is not
    installed."""
    from .core.config_guard import ConfigGuard
    from .core.outcomes import NO_TORCH, skip_test

    try:
        guard = ConfigGuard(_torch.import_config(module_name))
    except _torch.TorchNotInstalled:
        skip_test(NO_TORCH)
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
    from .core.settings import cudagraph_switches

    inductor_config.update(cudagraph_switches())
    try:
        yield inductor_config
    finally:
        _torch.reset_compiled_state()
