"""Inner pytest sessions, each in a process of its own, forked from one that has imported torch.

For tests that run many sessions whose subject is not torch's import: a fresh interpreter spends
about 2 s importing torch, and these sessions' conftests import it first anyway. Only ``torch``
itself is imported ahead: dynamo's and inductor's modules, which such conftests may change as
they load, load in each session's own process, as they would in a fresh interpreter. The
sessions' processes are forked from a server that never runs a test itself, and that ends when
its test module's tests are done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

_SERVER = r"""
import json
import os
import sys

import torch  # noqa: F401
import pytest


def session(request):
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path.insert(0, request["cwd"])  # as pytester's PYTHONPATH gives a fresh interpreter
    for fd, name in ((1, "stdout"), (2, "stderr")):
        with open(request[name], "w") as file:
            os.dup2(file.fileno(), fd)
    try:
        return int(pytest.main(request["args"]))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        code = 70
        try:  # whatever happens, the child never goes back to the server's loop
            code = session(json.loads(line))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


class ForkedSessions:
    """Runs pytest sessions in ``pytester``'s folder as ``runpytest_subprocess`` does."""

    def __init__(self) -> None:
        self._server = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
        assert self._server.stdin is not None
        assert self._server.stdout is not None
        outputs = pytester.path / "forked-session"
        outputs.mkdir()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(pytester.path), env.get("PYTHONPATH")])
        )
        request = {
            "cwd": str(pytester.path),
            "env": env,
            "args": [f"--basetemp={outputs / 'basetemp'}", *args],
            "stdout": str(outputs / "stdout"),
            "stderr": str(outputs / "stderr"),
        }
        start = time.perf_counter()
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        answer = self._server.stdout.readline()
        if not answer:
            raise RuntimeError(f"the session server ended (exit code {self._server.wait()})")
        duration = time.perf_counter() - start
        return pytest.RunResult(
            int(answer),
            _lines(outputs / "stdout"),
            _lines(outputs / "stderr"),
            duration,
        )

    def close(self) -> None:
        if self._server.stdin is not None:
            self._server.stdin.close()
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        if self._server.stdout is not None:
            self._server.stdout.close()


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()
