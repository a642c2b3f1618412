"""The plugin's command-line options and ini keys, as ``pytest --help`` shows them: declared by
``plugin.py``'s ``pytest_addoption``.

Every ini key is read as text (a list for the list keys), and a command-line option that is
not given is None: :mod:`.options` tells "not given" from a value and checks each value itself,
naming the option or ini key in its error.
"""

from __future__ import annotations

from typing import Any

import pytest

from .options import (
    DEFAULT_GUARD_MODE,
    FAIL_ON_KINDS,
    FORMAT_HELP,
    GUARD_MODES,
    ini_key,
    option_flag,
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("cudagraph-guard", "CUDA graphs and torch config (cudagraph-guard)")
    _add_guard_and_report(parser, group)
    _add_suite_options(parser, group)
    _add_process_options(parser, group)
    _option(
        group,
        "settings",
        "print the effective cudagraph settings with their sources, the relevant "
        "environment variables, versions and GPUs, then exit without running tests",
        action="store_true",
    )


def _option(group: pytest.OptionGroup, name: str, help: str, **kwargs: Any) -> None:
    group.addoption(option_flag(name), dest=ini_key(name), default=None, help=help, **kwargs)


def _ini(parser: pytest.Parser, name: str, help: str, kind: str | None = None) -> None:
    if kind in ("args", "linelist"):
        parser.addini(ini_key(name), help=help, type=kind, default=[])  # type: ignore[arg-type]
    else:
        parser.addini(ini_key(name), help=help, default="")


def _add_guard_and_report(parser: pytest.Parser, group: pytest.OptionGroup) -> None:
    _option(
        group,
        "guard",
        "what to do when a test leaves torch._inductor/_dynamo config or TORCHINDUCTOR_*, "
        "TORCHDYNAMO_*, TORCH_COMPILE* variables changed: restore them silently, warn "
        "(restore and warn), fail (restore and error the test), or off. "
        f"Default: ini cudagraph_guard, else {DEFAULT_GUARD_MODE}.",
        choices=GUARD_MODES,
    )
    _ini(parser, "guard", f"default for --cudagraph-guard: one of {', '.join(GUARD_MODES)}")
    _option(
        group,
        "report",
        "report, per test, the effective cudagraph settings with their source, the CUDA-graph "
        f"work that happened and every thread/TLS error; FORMAT is {FORMAT_HELP} "
        "(default term); repeatable",
        action="append",
        nargs="?",
        const="term",
        metavar="FORMAT",
    )
    _ini(
        parser,
        "report",
        f"report formats when --cudagraph-report is not given: {FORMAT_HELP}",
        "args",
    )


def _add_suite_options(parser: pytest.Parser, group: pytest.OptionGroup) -> None:
    _option(
        group,
        "threads",
        "run every test that has none of the plugin's markers as if marked "
        "cudagraph_thread(threads=N, tls=--cudagraph-tls), its settings as in the main thread; "
        "0 (the default): off",
        metavar="N",
    )
    _ini(parser, "threads", "default for --cudagraph-threads")
    _option(
        group,
        "tls",
        "the tls= of the threads that --cudagraph-threads applies (default native)",
        metavar="{native,init}",
    )
    _ini(parser, "tls", "default for --cudagraph-tls")
    _option(
        group,
        "subprocess",
        "run every test that has none of the plugin's markers as if marked "
        "cudagraph_subprocess(), its settings as in the main process: a test that crashes the "
        "interpreter fails alone",
        action="store_true",
    )
    _ini(parser, "subprocess", "default for --cudagraph-subprocess (true or false)")
    _option(
        group,
        "on",
        "run every test with triton.cudagraphs and triton.cudagraph_trees on (an audit of a "
        "suite under CUDA graphs), in its threads or process too",
        action="store_true",
    )
    _ini(parser, "on", "default for --cudagraph-on (true or false)")
    _option(
        group,
        "timeout",
        "the default timeout of both markers and of the options that apply them",
        metavar="SECONDS",
    )
    _ini(parser, "timeout", "default for --cudagraph-timeout")
    _option(
        group,
        "fail_on",
        "fail a test, at teardown, whose record holds one of these kinds: "
        + ", ".join(FAIL_ON_KINDS),
        metavar="KIND[,KIND...]",
    )
    _ini(parser, "fail_on", "default for --cudagraph-fail-on")


def _add_process_options(parser: pytest.Parser, group: pytest.OptionGroup) -> None:
    _ini(
        parser,
        "cuda_ahead",
        "test processes that cudagraph_subprocess sets up ahead initialise CUDA before their "
        "test, once the session's tests have shown they use it (true or false; default true)",
    )
    _ini(
        parser,
        "spares",
        "how many test processes cudagraph_subprocess sets up ahead: a whole number, or auto "
        "(the default: one, and once the session's tests use CUDA as many as the cores and "
        "the GPU's free memory allow, at most 8)",
    )
    _ini(
        parser,
        "process_env",
        "lines of NAME=VALUE set in every test process of cudagraph_subprocess and "
        "--cudagraph-subprocess before it initialises CUDA (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1); "
        "a marker's env= wins",
        "linelist",
    )
