"""The plugin's warning categories, public through ``pytest_cudagraph_guard``."""

from __future__ import annotations


class CudagraphConfigLeakWarning(UserWarning):
    """A test changed torch's cudagraph-related config or environment and left it changed."""


class CudagraphGuardWarning(UserWarning):
    """The plugin could not do part of its work (an unknown torch layout, say) and says what the
    user loses; the tests run on as they would without the plugin."""
