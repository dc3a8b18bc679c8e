"""ssgd.utils.lazy_dynamo: torch.optim's dynamo-disabled methods run the plain function until torch._dynamo is
imported, torch's disabled one from then on, and building and stepping an optimizer's bookkeeping no longer
imports torch._dynamo."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ssgd.utils import lazy_dynamo
from ssgd.utils.lazy_dynamo import ATTRIBUTE, UntilDynamo, deferred

ROOT = Path(__file__).resolve().parents[2]


def fresh_owner() -> type:
    """A class with one method wrapped as torch.optim.Optimizer wraps its own, and one plain method."""
    calls = []

    class Owner:
        @torch._disable_dynamo
        def wrapped(self, x):
            calls.append(x)
            return 2 * x

        def plain(self, x):
            return x

    Owner.calls = calls
    return Owner


def test_deferred_finds_the_wrapped_methods_only():
    owner = fresh_owner()
    assert deferred(owner) == ["wrapped"]
    assert isinstance(getattr(owner.wrapped.__wrapped__, ATTRIBUTE), UntilDynamo)
    assert not hasattr(owner.plain, ATTRIBUTE)


def test_the_plain_function_runs_while_dynamo_is_not_imported(monkeypatch):
    owner = fresh_owner()
    deferred(owner)
    monkeypatch.delitem(sys.modules, "torch._dynamo", raising=False)
    assert owner().wrapped(3) == 6 and owner.calls == [3]
    assert isinstance(getattr(owner.wrapped.__wrapped__, ATTRIBUTE), UntilDynamo)   # nothing installed yet


def test_torchs_disabled_function_from_the_first_call_after_dynamo_is_imported():
    import torch._dynamo  # noqa: F401

    owner = fresh_owner()
    deferred(owner)
    assert owner().wrapped(5) == 10 and owner.calls == [5]
    installed = getattr(owner.wrapped.__wrapped__, ATTRIBUTE)
    assert not isinstance(installed, UntilDynamo)
    assert getattr(installed, "_torchdynamo_disable", False)   # torch._dynamo.disable's mark


@pytest.mark.slow
def test_an_optimizer_is_built_and_checked_without_importing_dynamo():
    code = textwrap.dedent("""
        import sys, torch
        from ssgd.utils import lazy_dynamo
        lazy_dynamo.defer()
        p = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
        opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))]})
        opt.zero_grad()
        opt.load_state_dict(opt.state_dict())
        print("torch._dynamo" in sys.modules)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stdout + proc.stderr


def test_defer_is_idempotent():
    lazy_dynamo.defer()
    first = getattr(torch.optim.Optimizer.zero_grad.__wrapped__, ATTRIBUTE)
    lazy_dynamo.defer()
    assert getattr(torch.optim.Optimizer.zero_grad.__wrapped__, ATTRIBUTE) is first
