"""torch 2.1-2.12's CUDAGraph Trees thread behaviour, reproduced faithfully on torch 2.13.

torch 2.13 creates per-thread state lazily and serializes captures; the CPU build used in CI
cannot show the old failure. The conftest below installs the 2.1-2.12 ``get_obj`` (the same code)
into the real ``torch._inductor.cudagraph_trees`` module, compiled under the module's own file
name so that tracebacks show the same frames (``get_container`` -> ``get_obj`` in
``cudagraph_trees.py``), and removes 2.13's ``graph_capture_lock``.
"""

LEGACY_GET_OBJ = """
def get_obj(local, attr_name):
    if hasattr(local, attr_name):
        return getattr(local, attr_name)
    else:
        assert torch._C._is_key_in_tls(attr_name)
        return torch._C._get_obj_in_tls(attr_name)
"""

CONFTEST = f"""
import pytest
import torch._inductor.cudagraph_trees as cgt

LEGACY_GET_OBJ = {LEGACY_GET_OBJ!r}


@pytest.fixture(autouse=True)
def torch_before_2_13():
    saved = {{name: cgt.__dict__[name] for name in ("get_obj", "graph_capture_lock")
             if name in cgt.__dict__}}
    exec(compile(LEGACY_GET_OBJ, cgt.__file__, "exec"), cgt.__dict__)
    cgt.__dict__.pop("graph_capture_lock", None)
    yield
    cgt.__dict__.update(saved)
"""
