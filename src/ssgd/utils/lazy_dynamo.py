"""Build and step torch optimizers without importing `torch._dynamo` (1.8-2.3 s of CPU per process here).

torch.optim.Optimizer wraps `add_param_group`, `zero_grad`, `state_dict` and `load_state_dict` in
`torch._disable_dynamo`, whose wrapper imports `torch._dynamo` at its first call, only to make a function
that TorchDynamo will not trace. The wrapper looks for that function in the wrapped function's attribute
`__dynamo_disable` first. `defer()` sets that attribute to `UntilDynamo`: while `torch._dynamo` has not
been imported, nothing is being compiled, so calling the plain function is what the disabled one does; from
the first call after something imports `torch._dynamo` (torch.compile does), it installs and calls torch's
own disabled function, as the wrapper would have. Nothing this lab computes changes: the same functions run
on the same tensors.

Every process that builds an optimizer pays the import otherwise (the app's checks, and each rank of
backend=mpi and backend=torch: 5 processes at P = 4 on 2 cores). `defer()` is idempotent and does nothing
where torch's wrapper is not the one described (another torch version): then the import happens as before.
"""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch

ATTRIBUTE = "__dynamo_disable"     # where torch/_compile.py's wrapper caches the disabled function


class UntilDynamo:
    """The plain function `fn` while `torch._dynamo` is not imported; torch's dynamo-disabled `fn` from then on."""

    def __init__(self, fn: Callable[..., Any], recursive: bool) -> None:
        self.fn, self.recursive = fn, recursive

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:
            return self.fn(*args, **kwargs)
        disabled = torch._dynamo.disable(self.fn, self.recursive, wrapping=False)
        setattr(self.fn, ATTRIBUTE, disabled)       # as torch's wrapper caches it
        return disabled(*args, **kwargs)


def _wrapper_code() -> Any:
    """The code object of torch's `_disable_dynamo` wrapper (None where it has none)."""
    probe = torch._disable_dynamo(lambda: None)
    return getattr(probe, "__code__", None)


def deferred(owner: type = torch.optim.Optimizer) -> list[str]:
    """Give every method of `owner` wrapped by `torch._disable_dynamo` an UntilDynamo (see the module
    docstring); returns the names of the methods that now have one."""
    code = _wrapper_code()
    names = []
    for name, method in vars(owner).items():
        if code is None or getattr(method, "__code__", None) is not code:
            continue
        free = inspect.getclosurevars(method).nonlocals
        fn = free.get("fn")
        if fn is None:
            continue
        if not hasattr(fn, ATTRIBUTE):
            setattr(fn, ATTRIBUTE, UntilDynamo(fn, bool(free.get("recursive", True))))
        names.append(name)
    return names


def defer() -> None:
    """`deferred` on torch.optim.Optimizer, once per process (the module docstring says why)."""
    deferred()
