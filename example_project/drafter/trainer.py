"""Trains each drafter in its own thread to match the target's distribution (distillation).

Each drafter's step is compiled by inductor with ``mode="reduce-overhead"`` (CUDA graphs), on a
CPU too: there torch compiles the step and skips CUDA graphs, giving its reason. Each drafter
compiles a step of its own, in its own thread: before torch 2.13 a step shared by the drafters
would belong to the tree manager of the thread that ran it first, and every drafter would record
and replay through it (on an H200 with torch 2.11, four threads doing so corrupted the
interpreter in 4 of 19 runs). The fixes the plugin's report names are options, so the broken and
the fixed pipeline can both be run:

- ``ready_thread_state``: call ``ensure_cudagraph_tls()`` first in each drafter thread (torch
  before 2.13 creates CUDAGraph Trees state only in the main thread and autograd's threads);
- ``compile_mode``: the mode of ``torch.compile``; ``None`` compiles with CUDA graphs as
  inductor's config says, as a caller who turns them on with ``triton.cudagraphs = True`` wants;
- ``carry_config``: start each thread in a copy of the caller's ``contextvars`` context, so that
  config set by the caller is in effect there (torch >= 2.12 keeps overrides per thread);
- ``serialize_first_steps``: run the drafters' first steps, where they warm up and capture, one
  at a time, and let none go on until all have captured: torch before 2.13 does not serialize
  captures across threads, and any thread's kernel launched during another's capture breaks it.
  On CUDA before torch 2.13 the later steps take turns too: there, drafters replaying their
  graphs at once aborted the process on an H200 with torch 2.11 (in the backward pass, which
  autograd runs for every drafter on its one device thread).

On CUDA each step starts with ``torch.compiler.cudagraph_mark_step_begin()``, as a training loop
under CUDA graphs must: the step's outputs and gradients live in the graph's memory.
"""

from __future__ import annotations

import contextvars
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .models import Drafter, TargetModel

WARMUP_STEPS = 3  # reduce-overhead warms up, records, then replays
TORCH_RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


@dataclass(frozen=True)
class TrainerOptions:
    drafters: int = 4
    steps: int = 5
    batch: int = 32
    seq: int = 8
    lr: float = 0.5
    ready_thread_state: bool = False
    carry_config: bool = False
    serialize_first_steps: bool = False
    compile_mode: str | None = "reduce-overhead"
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")


def compile_step(
    step: Callable[..., torch.Tensor], mode: str | None
) -> Callable[..., torch.Tensor]:
    """The step compiled by inductor, on any device: on a CPU, torch compiles it and skips CUDA
    graphs with its reason."""
    return torch.compile(step, mode=mode)


class DrafterTrainer:
    def __init__(self, options: TrainerOptions, seed: int = 0) -> None:
        self.options = options
        generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):  # the same models for the same seed
            torch.manual_seed(seed)
            self.target = TargetModel().to(options.device).eval()
            self.drafters = [Drafter().to(options.device) for _ in range(options.drafters)]
        self.batches = [
            torch.randint(0, 64, (options.batch, options.seq), generator=generator).to(
                options.device
            )
            for _ in range(options.steps)
        ]
        self.losses: dict[int, list[float]] = {}
        self.errors: dict[int, BaseException] = {}
        self.cudagraphs_seen: dict[int, bool] = {}  # triton.cudagraphs as each thread saw it
        self._first_steps = threading.Lock()
        self._all_captured = threading.Barrier(options.drafters)

    def train_drafter(self, index: int) -> list[float]:
        """Distils the target into drafter ``index``; returns its loss at each step."""
        if self.options.ready_thread_state:
            import pytest_cudagraph_guard

            pytest_cudagraph_guard.ensure_cudagraph_tls()
        import torch._inductor.config as inductor_config

        self.cudagraphs_seen[index] = bool(inductor_config.triton.cudagraphs)
        drafter = self.drafters[index]
        optimizer = torch.optim.SGD(drafter.parameters(), lr=self.options.lr)

        def logits(tokens: torch.Tensor) -> torch.Tensor:
            return drafter(tokens)

        logits = _own_code(logits, f"drafter_{index}_logits")
        forward = compile_step(logits, self.options.compile_mode)

        def train_step(tokens: torch.Tensor) -> float:
            if self.options.device == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            with torch.no_grad():
                wanted = F.softmax(self.target(tokens), dim=-1)
            predicted = forward(tokens).clone()
            loss = F.kl_div(F.log_softmax(predicted, -1), wanted, reduction="batchmean")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return float(loss.detach())

        serialize = self.options.serialize_first_steps
        every_step = serialize and self.options.device == "cuda" and TORCH_RELEASE < (2, 13)
        losses = []
        try:
            for step, tokens in enumerate(self.batches):
                if serialize and step == WARMUP_STEPS:
                    self._all_captured.wait(timeout=300)
                if every_step or (serialize and step < WARMUP_STEPS):
                    with self._first_steps:
                        losses.append(train_step(tokens))
                else:
                    losses.append(train_step(tokens))
        except BaseException:
            self._all_captured.abort()  # no drafter waits for one that failed
            raise
        return losses

    def run(self) -> dict[int, list[float]]:
        """Trains every drafter, each in its own thread; raises the first error after all end."""
        threads = []
        for index in range(self.options.drafters):
            target = self._thread_body(index)
            if self.options.carry_config:
                target = _in_copied_context(target)
            threads.append(threading.Thread(target=target, name=f"drafter-{index}"))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.errors:
            raise next(iter(self.errors.values()))
        return self.losses

    def _thread_body(self, index: int) -> Callable[[], None]:
        def body() -> None:
            try:
                self.losses[index] = self.train_drafter(index)
            except BaseException as exc:
                self.errors[index] = exc

        return body


def _own_code(function: Callable[..., torch.Tensor], name: str) -> Callable[..., torch.Tensor]:
    """The same function on a code object of its own, which dynamo compiles and caches apart."""
    code = function.__code__.replace(co_name=name)
    return types.FunctionType(code, function.__globals__, name, None, function.__closure__)


def _in_copied_context(body: Callable[[], None]) -> Callable[[], None]:
    context = contextvars.copy_context()
    return lambda: context.run(body)
