"""Per-rank random streams derived from (seed, rank, stream name), stable across processes."""
from __future__ import annotations

import hashlib

import torch


def derive_seed(seed: int, rank: int, stream: str) -> int:
    """A 63-bit seed that depends only on (seed, rank, stream): the same in threads and MPI."""
    digest = hashlib.sha256(f"{seed}/{rank}/{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def rank_generator(seed: int, rank: int, stream: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch.Generator on `device` owned by one rank for one purpose (dropout, randomk, ...)."""
    return torch.Generator(device=device).manual_seed(derive_seed(seed, rank, stream))
