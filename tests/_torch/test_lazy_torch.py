"""The plugin never imports torch by itself, and pytest works without torch installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

BLOCK_TORCH = """
import sys
sys.modules["torch"] = None  # makes `import torch` raise ImportError, as if not installed
"""


@pytest.mark.processes
def test_importing_the_plugin_imports_no_torch() -> None:
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pytest_cudagraph_guard.plugin"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = [line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()]
    assert "pytest_cudagraph_guard.plugin" in imported
    assert [name for name in imported if name.split(".")[0] == "torch"] == []


def test_a_session_that_does_not_use_the_plugin_imports_no_torch(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        import sys

        def pytest_unconfigure(config):
            assert "torch" not in sys.modules, "the session imported torch"
            print("NO-TORCH-AT-EXIT")
        """
    )
    ourtester.makepyfile(
        """
        import os
        import sys

        def test_plain():
            assert "torch" not in sys.modules

        def test_env_leak_is_still_guarded():
            os.environ["TORCHINDUCTOR_MAX_AUTOTUNE"] = "1"
        """
    )
    result = ourtester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        ["*$TORCHINDUCTOR_MAX_AUTOTUNE: <unset> -> '1'", "NO-TORCH-AT-EXIT"]
    )


def test_without_torch_plugin_users_are_skipped(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest(BLOCK_TORCH)
    ourtester.makepyfile(
        """
        import os

        def test_inductor(inductor_config):
            pass

        def test_dynamo(dynamo_config):
            pass

        def test_cudagraphs(cudagraphs):
            pass

        def test_plain():
            pass

        def test_env_leak():
            os.environ["TORCH_COMPILE_DEBUG"] = "1"
        """
    )
    result = ourtester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=3, warnings=1)
    skips = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert len(skips) == 3
    assert all(line.endswith(": torch is not installed") for line in skips)


def test_the_plugin_can_be_disabled_by_name(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        def test_uses(inductor_config):
            pass
        """
    )
    result = ourtester.runpytest("-p", "no:cudagraph_guard")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'inductor_config' not found*"])
    disabled = ourtester.runpytest("-p", "no:cudagraph_guard", "--cudagraph-guard=warn")
    assert disabled.ret == pytest.ExitCode.USAGE_ERROR


def test_the_entry_point_registers_the_plugin(ourtester: pytest.Pytester) -> None:
    result = ourtester.runpytest("--trace-config", "--co", "-q")
    result.stdout.fnmatch_lines(["*cudagraph_guard*pytest_cudagraph_guard/plugin.py*"])
