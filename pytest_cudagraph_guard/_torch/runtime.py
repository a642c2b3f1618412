"""Whether torch is there, and its import for the plugin's own use (quiet, never the user's
warnings). Read by every part that may meet torch (the plugin's start, the settings, a test
process); which torch and which GPUs are in ``release``."""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from types import ModuleType


class TorchNotInstalled(ImportError):
    """Raised when a feature needs torch and it cannot be imported."""


def torch_loaded() -> bool:
    """Whether the test session has imported torch already (no import is attempted)."""
    return sys.modules.get("torch") is not None


def import_quietly(name: str) -> ModuleType:
    """``importlib.import_module(name)`` for the plugin's own use: what the import warns (torch's
    deprecations, say) is not the user's, so neither the user's warning filters nor the warnings
    summary see it. Outside the main thread, where changing the filters would race pytest's
    own, a plain import."""
    if threading.current_thread() is not threading.main_thread():
        return importlib.import_module(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def import_torch() -> ModuleType:
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        return import_quietly("torch")
    except ImportError as exc:
        raise TorchNotInstalled("torch is not installed") from exc


def torch_installed() -> bool:
    """Whether torch can be imported; imports it where the session has not."""
    try:
        import_torch()
    except TorchNotInstalled:
        return False
    return True
