"""The plugin's warning categories, public through ``pytest_cudagraph_guard``. Imports nothing
of the plugin's at load: ``-W error::pytest_cudagraph_guard.CudagraphGuardWarning`` finds them
without loading the rest."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


class CudagraphConfigLeakWarning(UserWarning):
    """A test changed torch's cudagraph-related config or environment and left it changed."""


class CudagraphGuardWarning(UserWarning):
    """The plugin could not do part of its work (an unknown torch layout, say) and says what the
    user loses; the tests run on as they would without the plugin."""


def warn_torch_notices(config: pytest.Config | None = None) -> None:
    """Warns, once each, what the torch boundary noted since the last call: parts that could not
    work on this torch and internal errors of ours. Called only from pytest hooks, where pytest
    records warnings and where nothing of torch's or the user's is on the stack; with
    ``config``, from a hook before the session's warnings are recorded (``pytest_configure``),
    as a warning of the configuration."""
    from .. import _torch

    for notice in _torch.take_notices():
        if config is None:
            warnings.warn(CudagraphGuardWarning(notice), stacklevel=2)
        else:
            config.issue_config_time_warning(CudagraphGuardWarning(notice), stacklevel=2)
