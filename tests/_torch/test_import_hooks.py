"""Actions run once a module is imported: how a test process applies the cudagraph settings
where it may wait for inductor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def test_an_action_after_import_runs_once_the_module_is_executed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How a test process applies the cudagraph settings where it may wait for inductor."""
    from pytest_cudagraph_guard._torch.import_hooks import run_after_import

    (tmp_path / "late_config.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "late_config", None)
    monkeypatch.delitem(sys.modules, "late_config")  # and removed again when the test ends
    seen: list[int] = []

    def action() -> None:
        module = sys.modules["late_config"]
        seen.append(module.VALUE)
        module.VALUE = 2

    assert run_after_import("late_config", action)
    import late_config

    assert (late_config.VALUE, seen) == (2, [1])
    assert not run_after_import("late_config", action)
    assert seen == [1]
    assert "exec_module" not in vars(late_config.__loader__)  # the loader is left as it was
