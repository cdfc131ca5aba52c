"""Counting the reads that make the host wait for a GPU, on a GPU or standing in for one on a CPU: so the suite checks
on every machine that the engine's step loop reads nothing back and that CoT sampling copies no logits per token; the
tensors a step allocates (`FreshTensors`), so it checks that a static step keeps none (`assert_a_step_keeps_nothing`);
the graphs dynamo traces of a step (`traced_graphs`); and, on a GPU, the replays of CUDA graphs (`counting_replays`)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import pytest
import torch
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode

# Tensor methods that copy a tensor to the host or read a value there. (`.to(device)` is left out: on a CPU, a move to
# the model's device and a copy to the host are the same call.)
HOST_METHODS = ("cpu", "tolist", "numpy", "item", "__bool__", "__int__", "__float__", "__index__")
# Operators whose output shape depends on the input's values: on a GPU they wait for the values to size the output.
VALUE_SHAPED = {"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive"}


def _value_shaped(func, args: tuple) -> bool:
    """Whether an operator's output shape depends on its inputs' values (`VALUE_SHAPED`, or indexing by a mask)."""
    if func.overloadpacket.__name__ in VALUE_SHAPED:
        return True
    return func is torch.ops.aten.index.Tensor and any(
        isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])


class HostReads(TorchDispatchMode):
    """Within `with HostReads(device) as reads:`, `reads.calls` counts the host reads of work on `device` and
    `reads.elements` the elements they read.

    On a GPU: every copy of the device's tensors to the host and every scalar read of one (seen as the operators
    run), and the value-shaped operators (`VALUE_SHAPED`, indexing by a mask) on them. On the CPU, where every tensor
    is on the host, the calls of the same code that would be such reads on a GPU: `HOST_METHODS` and value-shaped
    operators, on any tensor.
    """

    def __init__(self, device: str | torch.device) -> None:
        super().__init__()
        self.on_cpu = torch.device(device).type == "cpu"
        self.calls = self.elements = 0
        self._saved: dict[str, object] = {}

    def __enter__(self) -> HostReads:
        if self.on_cpu:
            for name in HOST_METHODS:
                self._saved[name] = method = getattr(torch.Tensor, name)
                setattr(torch.Tensor, name, self._counted(method))
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        for name, method in self._saved.items():
            setattr(torch.Tensor, name, method)

    def _count(self, elements: int) -> None:
        self.calls += 1
        self.elements += elements

    def _counted(self, method):
        def counted(tensor: torch.Tensor, *args, **kwargs):
            self._count(tensor.numel())
            return method(tensor, *args, **kwargs)

        return counted

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        watched = tensors if self.on_cpu else [t for t in tensors if t.device.type != "cpu"]
        if not watched:
            return out
        if _value_shaped(func, args):
            self._count(watched[0].numel())
        elif not self.on_cpu and func is torch.ops.aten._local_scalar_dense.default:
            self._count(1)
        elif not self.on_cpu and isinstance(out, torch.Tensor) and out.device.type == "cpu":
            self._count(out.numel())  # a copy to the host (`.cpu()`, `.tolist()`, a host tensor's `copy_`)
        return out


class FreshTensors(TorchDispatchMode):
    """Weak references to every tensor an operator allocates (an output its schema does not alias to an input: not a
    view, not an in-place or `out=` result)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[weakref.ref] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        for returned, tensor in zip(func._schema.returns, outputs, strict=False):
            if isinstance(tensor, torch.Tensor) and returned.alias_info is None:
                self.made.append(weakref.ref(tensor))
        return out


def assert_a_step_keeps_nothing(step: Callable[[], None], buffers: Callable[[], list[torch.Tensor]]) -> None:
    """One call of `step` (a static step, after its first) allocates no tensor that outlives it (its temporaries are
    what a CUDA graph keeps in its private pool), keeps every tensor of `buffers()` at its address, and reads nothing
    back to the host (`.item()`, `.cpu()`, `.tolist()`, a tensor's truth value, an operator whose output shape depends
    on values)."""
    addresses = [t.data_ptr() for t in buffers()]
    with HostReads("cpu") as host, FreshTensors() as fresh:
        step()
    gc.collect()
    assert host.calls == 0
    assert fresh.made, "the step's operators were seen"
    assert not [ref for ref in fresh.made if ref() is not None], "a tensor made by the step outlived it"
    assert [t.data_ptr() for t in buffers()] == addresses


def traced_graphs(step: Callable[[], None], calls: int) -> int:
    """The graphs dynamo traces over `calls` calls of `step`, each whole (`fullgraph`: a host read, a branch on a value
    or an unsupported call fails it; no compiler)."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, fullgraph=True, backend="eager", dynamic=False)
    for _ in range(calls):
        compiled()
    return counters["stats"]["unique_graphs"]


def counting_replays(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-element list that counts the replays of every `torch.cuda.CUDAGraph` from now on (the test's end)."""
    replays = [0]
    replay = torch.cuda.CUDAGraph.replay

    def counted(graph: torch.cuda.CUDAGraph) -> None:
        replays[0] += 1
        replay(graph)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", counted)
    return replays
