"""The options that guard a whole suite without editing it, read once per session.

Each is a command-line option and an ini key of the same name; the command line wins. A bad
value is a usage error that names the option or ini key and the value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import pytest

from .diagnosis import ALL_KINDS
from .markers import SUBPROCESS_MARKER, THREAD_MARKER, TLS_MODES

FINDING_KINDS: Final = ("leak", "cudagraph-skip")
FAIL_ON_KINDS: Final = (*ALL_KINDS, *FINDING_KINDS)
# The option that applies each marker to a suite's unmarked tests.
OPTION_OF: Final = {
    THREAD_MARKER: "--cudagraph-threads",
    SUBPROCESS_MARKER: "--cudagraph-subprocess",
}


@dataclass(frozen=True)
class SuiteOptions:
    threads: int = 0  # 0: off
    tls: str = "native"
    subprocess: bool = False
    timeout: float | None = None  # the markers' default timeout where they give none
    fail_on: frozenset[str] = frozenset()
    cuda_ahead: bool = True
    spares: int | None = None  # processes set up ahead per zygote; None: automatic

    @property
    def applies_markers(self) -> bool:
        return self.threads > 0 or self.subprocess

    def as_record(self) -> dict[str, Any]:
        """The options as the report's environment shows them (builtin types)."""
        return {
            "threads": self.threads,
            "tls": self.tls,
            "subprocess": self.subprocess,
            "timeout": self.timeout,
            "fail_on": sorted(self.fail_on),
        }


def add_options(parser: pytest.Parser, group: pytest.OptionGroup) -> None:
    group.addoption(
        "--cudagraph-threads",
        dest="cudagraph_threads",
        metavar="N",
        default=None,
        help=(
            "run every test that has none of the plugin's markers as if marked "
            "cudagraph_thread(threads=N, tls=--cudagraph-tls); 0 (the default): off"
        ),
    )
    parser.addini("cudagraph_threads", help="default for --cudagraph-threads", default="0")
    group.addoption(
        "--cudagraph-tls",
        dest="cudagraph_tls",
        default=None,
        metavar="{native,init}",
        help="the tls= of the threads that --cudagraph-threads applies (default native)",
    )
    parser.addini("cudagraph_tls", help="default for --cudagraph-tls", default="native")
    group.addoption(
        "--cudagraph-subprocess",
        dest="cudagraph_subprocess",
        action="store_true",
        default=None,
        help="run every test that has none of the plugin's markers as if marked "
        "cudagraph_subprocess(): a test that crashes the interpreter fails alone",
    )
    parser.addini(
        "cudagraph_subprocess",
        type="bool",
        help="default for --cudagraph-subprocess",
        default=False,
    )
    group.addoption(
        "--cudagraph-timeout",
        dest="cudagraph_timeout",
        metavar="SECONDS",
        default=None,
        help="the default timeout of both markers and of the options that apply them",
    )
    parser.addini("cudagraph_timeout", help="default for --cudagraph-timeout", default="")
    group.addoption(
        "--cudagraph-fail-on",
        dest="cudagraph_fail_on",
        metavar="KIND[,KIND...]",
        default=None,
        help=(
            "fail a test, at teardown, whose record holds one of these kinds: "
            + ", ".join(FAIL_ON_KINDS)
        ),
    )
    parser.addini("cudagraph_fail_on", help="default for --cudagraph-fail-on", default="")
    parser.addini(
        "cudagraph_cuda_ahead",
        type="bool",
        help=(
            "test processes that cudagraph_subprocess sets up ahead initialise CUDA before their "
            "test, once the session's tests have shown they use it (default true)"
        ),
        default=True,
    )
    parser.addini(
        "cudagraph_spares",
        help=(
            "how many test processes cudagraph_subprocess sets up ahead: a whole number, or auto "
            "(the default: one, and once the session's tests use CUDA as many as the cores and "
            "the GPU's free memory allow, at most 8)"
        ),
        default="auto",
    )


def read_options(config: pytest.Config) -> SuiteOptions:
    return SuiteOptions(
        threads=_threads(_value(config, "cudagraph_threads")),
        tls=_tls(_value(config, "cudagraph_tls")),
        subprocess=bool(_value(config, "cudagraph_subprocess").value),
        timeout=_timeout(_value(config, "cudagraph_timeout")),
        fail_on=_kinds(_value(config, "cudagraph_fail_on")),
        cuda_ahead=bool(config.getini("cudagraph_cuda_ahead")),
        spares=_spares(_Named(config.getini("cudagraph_spares"), "ini option cudagraph_spares")),
    )


_options_key = pytest.StashKey[SuiteOptions]()


def suite_options(config: pytest.Config) -> SuiteOptions:
    """The session's options, read and checked once."""
    options = config.stash.get(_options_key, None)
    if options is None:
        options = config.stash[_options_key] = read_options(config)
    return options


class _Named:
    """A value and where it came from, for error messages."""

    def __init__(self, value: object, origin: str) -> None:
        self.value = value
        self.origin = origin

    def error(self, expected: str) -> pytest.UsageError:
        return pytest.UsageError(f"{self.origin}: expected {expected}, got {self.value!r}")


def _value(config: pytest.Config, name: str) -> _Named:
    given = config.getoption(name)
    if given is not None:
        return _Named(given, "--" + name.replace("_", "-"))
    return _Named(config.getini(name), f"ini option {name}")


def _threads(named: _Named) -> int:
    text = str(named.value).strip()
    if not text.isdigit():
        raise named.error("a whole number of threads (0: off)")
    return int(text)


def _spares(named: _Named) -> int | None:
    text = str(named.value).strip()
    if text == "auto":
        return None
    if not text.isdigit():
        raise named.error("auto or a whole number of processes (0: none)")
    return int(text)


def _tls(named: _Named) -> str:
    text = str(named.value).strip()
    if text not in TLS_MODES:
        raise named.error(" or ".join(TLS_MODES))
    return text


def _timeout(named: _Named) -> float | None:
    text = str(named.value).strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise named.error("a positive number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise named.error("a positive number of seconds")
    return seconds


def _kinds(named: _Named) -> frozenset[str]:
    raw = named.value if isinstance(named.value, list) else [named.value]
    kinds = [k.strip() for item in raw for k in str(item).replace(",", " ").split() if k.strip()]
    unknown = [k for k in kinds if k not in FAIL_ON_KINDS]
    if unknown:
        raise pytest.UsageError(
            f"{named.origin}: unknown kind(s) {', '.join(map(repr, unknown))}; "
            f"known kinds: {', '.join(FAIL_ON_KINDS)}"
        )
    return frozenset(kinds)
