"""What a spare's kernels' warm-up saves a CUDA test: each test body's first run in a fresh
process whose context is created, without and with the plugin's warm-up before it (its steps
all run, then forgotten), in children of this process, which imports torch and never
initialises CUDA (as the zygote). Rounds alternate the two; medians:

    python benchmarks/warm_up_cost.py [ROUNDS]       # needs CUDA

The bodies: ``bench.py --gpu``'s test (a matmul, a captured graph, ``allclose``), one whose
kernels are mostly outside the warm-up (float16 matmul, softmax, layer norm, GELU, a
convolution, argmax) and a training step (embedding, bfloat16 autocast linear, cross-entropy,
backward, SGD).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable

import torch
from bench_gpu import run_the_bench_test
from cuda_process_cost import cuda_available

from pytest_cudagraph_guard.isolation.cuda import CudaAhead
from pytest_cudagraph_guard.isolation.kernel_warm_up import forget_warm_up, kernel_warm_up_steps


def other_ops() -> None:
    a = torch.ones(256, 128, device="cuda", dtype=torch.float16)
    c = (a @ a.t()).float()
    normed = torch.nn.functional.layer_norm(torch.softmax(c, dim=-1), (256,))
    image = torch.ones(2, 3, 32, 32, device="cuda")
    conv = torch.nn.functional.conv2d(image, torch.ones(8, 3, 3, 3, device="cuda"))
    assert torch.nn.functional.gelu(normed).argmax(dim=1).numel() == 256
    assert conv.shape == (2, 8, 30, 30)


def training_step() -> None:
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(1000, 64).cuda()
    linear = torch.nn.Linear(64, 1000).cuda()
    optimizer = torch.optim.SGD([*embedding.parameters(), *linear.parameters()], lr=0.1)
    tokens = torch.randint(0, 1000, (32, 16), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = linear(embedding(tokens))
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, 1000), tokens.view(-1))
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss).item()


BODIES: dict[str, Callable[[], None]] = {
    "the bench's test": run_the_bench_test,
    "other kernels": other_ops,
    "a training step": training_step,
}


def _first_run(body: str, warm: bool) -> dict[str, float]:
    torch.cuda.init()  # type: ignore[no-untyped-call]
    torch.cuda.synchronize()
    start = time.perf_counter()
    if warm:  # as a spare whose test comes after its last step
        steps = kernel_warm_up_steps(torch)
        ahead = CudaAhead()
        ahead.warm_up_with(steps, lambda: forget_warm_up(torch))
        ahead.warm_up_while(lambda: True)
        if ahead.warmed_up != [name for name, _ in steps]:
            raise RuntimeError("the warm-up did not run all its steps: its error is on stderr")
    warmed = time.perf_counter()
    BODIES[body]()
    torch.cuda.synchronize()
    return {"warm_up": warmed - start, "body": time.perf_counter() - warmed}


def _in_child(body: str, warm: bool) -> dict[str, float]:
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:  # whatever happens, the child never returns into the parent's code
            os.close(reader)
            os.write(writer, json.dumps(_first_run(body, warm)).encode())
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:  # its traceback, if it had one, is on stderr above
        raise RuntimeError(f"the child for {body!r} gave no figures (wait status {status})")
    return dict(json.loads(data))


def main() -> int:
    if not cuda_available():  # asked in a child: this process must not initialise CUDA
        print("CUDA is not available")
        return 0
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    for body in BODIES:
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for _ in range(rounds):
            for warm in (False, True):
                runs[warm].append(_in_child(body, warm))
        cold = statistics.median(run["body"] for run in runs[False]) * 1e3
        warmed = statistics.median(run["body"] for run in runs[True]) * 1e3
        warm_up = statistics.median(run["warm_up"] for run in runs[True]) * 1e3
        print(
            f"{body}: first run {cold:.0f} ms, {warmed:.0f} ms after the warm-up "
            f"({warm_up:.0f} ms in the spare): {cold - warmed:.0f} ms off the test",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
