"""Driving collective programs: the one loop every executor uses.

A `Collective.program(rank, P, payload)` is a generator that yields operations (`ssgd.comm.ops`)
and returns this rank's `Reduced`. An executor only says how one operation is carried out for one
rank; `run_program` feeds each operation's result back into the program until it returns. The
MPI and torch.distributed executors (`ssgd.comm.executors.mpi`, `ssgd.comm.executors.torch_dist`) run
their rank with it; the in-process executor (`ssgd.comm.executors.thread`) interleaves all P programs
in lock step with `advance`, the single step that `run_program` loops.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ssgd.comm.base import Collective, Program, Reduced
from ssgd.comm.ops import Op
from ssgd.payload import Payload


def advance(program: Program, value: Any = None) -> tuple[Op | None, Reduced | None]:
    """Resume `program`, sending it `value` (the previous operation's result; None to start).

    Returns (next operation, None) while it runs, (None, its result) once it has returned.
    TypeError when a program returns anything but a `Reduced`.
    """
    try:
        return program.send(value), None
    except StopIteration as stop:
        if not isinstance(stop.value, Reduced):
            raise TypeError(f"a collective program returned {type(stop.value).__name__}, not Reduced") from None
        return None, stop.value


def run_program(collective: Collective, rank: int, P: int, payload: Payload,
                execute: Callable[[Op], Any]) -> Reduced:
    """Run rank `rank`'s program of `collective` to completion; `execute(op)` carries out one
    operation for this rank and returns what the program receives back (None for Send/Recv)."""
    program = collective.program(rank, P, payload)
    op, result = advance(program)
    while op is not None:
        op, result = advance(program, execute(op))
    assert result is not None
    return result
