"""The wire format of `Sparse` payloads in the sparse collectives (AllGather, gTopKAllReduce).

gTop-k paper (Shi et al., ICDCS 2019, arXiv:1901.04359) counts 4 bytes per index and 4 per value:
a sparse vector of n entries travels as one int32 tensor of 2n elements,
`cat([idx.int32, val.float32.view(int32)])`. That is lossless and 8 bytes per entry, unlike the
released code's packing into one float64 buffer (hclhkbu/gtopkssgd, allreducer.py), which takes 16
bytes per entry and keeps indices exact only below 2^53. The price of int32 indices: a vector may
have at most `MAX_NUMEL` entries; `pack_sparse` refuses longer ones, and
`ssgd.comm.base.Collective.check_numel` lets a caller refuse such a model before training.

`WireFormat` adds 16-bit values (`compressor.wire.values=fp16|bf16`, docs/compressors.md#wire-formats):
a sparse vector then travels as one uint8 tensor of 6n bytes, the n int32 indices' bytes and then the
n values' fp16 / bf16 bits, and a dense one (`ssgd.comm.collectives.dense`) as 2 bytes per element. Values are
rounded ONCE, on the sending rank, by `WireFormat.encode` (round to nearest even, fp16 saturating at
+-65504 instead of overflowing to infinity); the payload then carries the 16-bit values themselves,
so that the error-feedback memory subtracts exactly what was sent (`ssgd.payload.Sparse.subtract_from`)
and keeps the rounding error. The fp32 format is the int32 [2n] above, unchanged.

Narrow indices (`WireFormat(narrow_indices=True)`): a vector of numel <= 2^16
(`NARROW_NUMEL`) has indices 0 .. 65535, which fit uint16, so `pack` sends 2 bytes per index instead
of 4: one uint8 tensor of the n uint16 indices' bytes and then the n values' bytes (4 + 2 = 6 bytes
per fp32 entry, 2 + 2 = 4 per fp16 / bf16 entry). `unpack` decodes the same int64 indices, so the
result is the same bits. Longer vectors keep int32 indices. `index_bytes` is the one place the
index width is decided; the cost model and the byte counts follow it. Only `pack` / `unpack` (the
sparse AllGather, which knows numel) narrow; the gTop-k tree's `pack_entries` / `unpack_raw` keep
int32, since its C merge (`ssgd.native`) takes int32 indices.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ssgd.errors import BadArgument
from ssgd.payload import Dense, Payload, Sparse

MAX_NUMEL = 2**31 - 1   # indices travel as int32
VALUE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
INDEX_BYTES = 4
NARROW_NUMEL = 2**16    # indices 0 .. 2^16 - 1 fit uint16
NARROW_INDEX_BYTES = 2


def index_bytes(numel: int, narrow: bool = False) -> int:
    """Bytes of one index of a sparse payload of a `numel`-vector on the wire: 2 (uint16) when `narrow`
    and numel <= 2^16, else 4 (int32)."""
    return NARROW_INDEX_BYTES if narrow and numel <= NARROW_NUMEL else INDEX_BYTES


def check_numel(numel: int, what: str = "sparse payload") -> None:
    """ValueError (one line) when a vector of `numel` entries cannot use the int32 wire format."""
    if numel > MAX_NUMEL:
        raise ValueError(f"{what}: d={numel:,} exceeds {MAX_NUMEL:,} (2^31 - 1), the largest length whose "
                         "indices fit the int32 wire format of the sparse collectives")


def pack_sparse(s: Sparse, out: Tensor | None = None) -> Tensor:
    """int32 [2n]: indices then the values' bits, written into `out` (int32 [2n]) when given, which
    is then returned. ValueError when s.numel > MAX_NUMEL."""
    check_numel(s.numel)
    if out is None:
        return torch.cat([s.idx.to(torch.int32), s.val.to(torch.float32).view(torch.int32)])
    return pack_entries(s.idx, s.val, out)


def pack_entries(idx: Tensor, val: Tensor, out: Tensor) -> Tensor:
    """`pack_sparse` of (indices < 2^31, values) into `out` (int32 [2n]); returns `out`."""
    n = idx.numel()
    if out.dtype != torch.int32 or out.shape != (2 * n,):
        raise ValueError(f"pack_sparse: out must be int32 [{2 * n}], got {out.dtype} {tuple(out.shape)}")
    out[:n].copy_(idx)
    out[n:].view(torch.float32).copy_(val)
    return out


def unpack_sparse(buf: Tensor, numel: int) -> Sparse:
    """Inverse of `pack_sparse` (bit-exact). The indices are a new int64 tensor; the values are a
    float32 VIEW of `buf` (no copy): valid while `buf` is not reused."""
    n = buf.numel() // 2
    return Sparse(buf[:n].to(torch.int64), buf[n:].view(torch.float32), numel)


@dataclass(frozen=True)
class WireFormat:
    """How the values of a payload travel: `values` = "fp32" (default, lossless), "fp16" or "bf16".

    Indices are int32 (4 bytes) unless `narrow_indices` and numel <= 2^16 (uint16, 2 bytes; `pack` /
    `unpack` only); a sparse int32 entry takes `entry_bytes` = 8 (fp32) or 6 bytes (`entry_bytes_for(numel)`
    counts narrow ones), a dense element `value_bytes` = 4 or 2. `encode` rounds a payload's values to the format
    (fp32: the payload itself); `pack` / `unpack` put a `Sparse` payload's entries on the wire and back.
    """

    values: str = "fp32"
    narrow_indices: bool = False     # uint16 indices for vectors of numel <= 2^16 (module docstring)

    def __post_init__(self) -> None:
        if not isinstance(self.narrow_indices, bool):
            raise BadArgument("narrow_indices", self.narrow_indices, "allowed: true, false")
        if self.values not in VALUE_DTYPES:
            raise BadArgument("values", self.values, f"allowed: {', '.join(VALUE_DTYPES)}")

    @property
    def dtype(self) -> torch.dtype:
        return VALUE_DTYPES[self.values]

    @property
    def lossy(self) -> bool:
        return self.values != "fp32"

    @property
    def value_bytes(self) -> int:
        return torch.empty(0, dtype=self.dtype).element_size()

    @property
    def entry_bytes(self) -> int:
        """Bytes of one sparse (index, value) entry on the wire: 8 for fp32, 6 for fp16 / bf16."""
        return INDEX_BYTES + self.value_bytes

    def entry_bytes_for(self, numel: int) -> int:
        """Bytes of one entry of a sparse payload of a `numel`-vector as `pack` sends it:
        `index_bytes(numel, narrow_indices)` + `value_bytes` (8 / 6, or 6 / 4 with narrow indices)."""
        return index_bytes(numel, self.narrow_indices) + self.value_bytes

    def narrow_for(self, numel: int) -> bool:
        """Whether `pack` sends uint16 indices for a `numel`-vector."""
        return index_bytes(numel, self.narrow_indices) == NARROW_INDEX_BYTES

    def round(self, values: Tensor) -> Tensor:
        """`values` (float32) in this format's dtype, to nearest even; fp16 saturates at its largest
        finite value (65504) instead of overflowing, so a finite input stays finite. NaN stays NaN.
        fp32: `values` itself."""
        if not self.lossy:
            return values
        if values.dtype == self.dtype:
            return values
        top = torch.finfo(self.dtype).max
        return values.clamp(-top, top).to(self.dtype)

    def encode(self, payload: Payload) -> Payload:
        """`payload` with its values rounded to this format (`Sparse` and `Dense`); fp32: unchanged.
        TypeError for another payload kind under a 16-bit format (it would be rounded unknowingly)."""
        if not self.lossy:
            return payload
        if isinstance(payload, Sparse):
            return Sparse(payload.idx, self.round(payload.val), payload.numel)
        if isinstance(payload, Dense):
            return Dense(self.round(payload.values))
        raise TypeError(f"wire values={self.values}: cannot encode a {type(payload).__name__} payload "
                        "(only Sparse and Dense)")

    def check(self, values: Tensor, who: str) -> None:
        """TypeError unless `values` are in this format's dtype (a payload `encode` made)."""
        if values.dtype != self.dtype:
            raise TypeError(f"{who}: wire values={self.values} needs payload values of dtype {self.dtype}, got "
                            f"{values.dtype} (encode the payload with the collective's `encode` first)")

    def message(self, n: int, device: torch.device | str = "cpu") -> Tensor:
        """An uninitialised wire buffer for n entries: int32 [2n] (fp32) or uint8 [6n] (16-bit)."""
        if not self.lossy:
            return torch.empty(2 * n, dtype=torch.int32, device=device)
        return torch.empty(self.entry_bytes * n, dtype=torch.uint8, device=device)

    def entries_in(self, buf: Tensor) -> int:
        """How many entries the wire buffer `buf` carries."""
        return buf.numel() // 2 if not self.lossy else buf.numel() // self.entry_bytes

    def pack(self, s: Sparse, out: Tensor | None = None) -> Tensor:
        """`s` on the wire (into `out`, a `message(len(s))` buffer, when given). ValueError when
        s.numel > MAX_NUMEL; TypeError when s.val is not in this format's dtype (16-bit formats)."""
        if self.narrow_for(s.numel):
            return self._pack_narrow(s, out)
        if not self.lossy:
            return pack_sparse(s, out)
        check_numel(s.numel)
        self.check(s.val, "pack")
        return self.pack_entries(s.idx, s.val, self.message(len(s), s.idx.device) if out is None else out)

    def pack_entries(self, idx: Tensor, val: Tensor, out: Tensor) -> Tensor:
        """(indices < 2^31, values) into `out` (a `message(n)` buffer); float32 values are rounded
        (`round`); returns `out`."""
        if not self.lossy:
            return pack_entries(idx, val, out)
        n = idx.numel()
        if out.dtype != torch.uint8 or out.shape != (self.entry_bytes * n,):
            raise ValueError(f"pack: out must be uint8 [{self.entry_bytes * n}], got {out.dtype} {tuple(out.shape)}")
        out[:INDEX_BYTES * n].view(torch.int32).copy_(idx)
        out[INDEX_BYTES * n:].view(self.dtype).copy_(self.round(val))
        return out

    def unpack_raw(self, buf: Tensor) -> tuple[Tensor, Tensor]:
        """(int32 indices, values in this format's dtype) of a wire buffer, as views of `buf` where its
        alignment allows (copies otherwise)."""
        n = self.entries_in(buf)
        if not self.lossy:
            return buf[:n], buf[n:].view(torch.float32)
        head, tail = buf[:INDEX_BYTES * n], buf[INDEX_BYTES * n:]
        if head.storage_offset() % INDEX_BYTES:           # a block of an allgather may start anywhere
            head, tail = head.clone(), tail.clone()
        return head.view(torch.int32), tail.view(self.dtype)

    def unpack(self, buf: Tensor, numel: int) -> Sparse:
        """The `Sparse` a wire buffer carries, indices int64 and values decoded to float32 (exactly:
        every fp16 / bf16 number is a float32 number). For fp32 the values are a view of `buf`
        (`unpack_sparse`); for 16-bit formats new tensors."""
        if self.narrow_for(numel):
            return self._unpack_narrow(buf, numel)
        if not self.lossy:
            return unpack_sparse(buf, numel)
        idx, val = self.unpack_raw(buf)
        return Sparse(idx.to(torch.int64), val.to(torch.float32), numel)

    def _pack_narrow(self, s: Sparse, out: Tensor | None) -> Tensor:
        """uint8 [(2 + value_bytes) n]: the n uint16 indices' bytes, then the n values' bytes."""
        n, per = len(s), self.entry_bytes_for(s.numel)
        if self.lossy:
            self.check(s.val, "pack")
        if out is None:
            out = torch.empty(per * n, dtype=torch.uint8, device=s.idx.device)
        elif out.dtype != torch.uint8 or out.shape != (per * n,):
            raise ValueError(f"pack: out must be uint8 [{per * n}], got {out.dtype} {tuple(out.shape)}")
        cut = NARROW_INDEX_BYTES * n        # the values may start off their alignment: copy bytes
        out[:cut].copy_(s.idx.to(torch.uint16).view(torch.uint8))
        out[cut:].copy_(s.val.to(self.dtype).contiguous().view(torch.uint8))
        return out

    def _unpack_narrow(self, buf: Tensor, numel: int) -> Sparse:
        """Inverse of `_pack_narrow`: new int64 indices and float32 values."""
        n = buf.numel() // self.entry_bytes_for(numel)
        head, tail = buf[:NARROW_INDEX_BYTES * n], buf[NARROW_INDEX_BYTES * n:]
        if tail.storage_offset() % self.value_bytes or head.storage_offset() % NARROW_INDEX_BYTES:
            head, tail = head.clone(), tail.clone()     # a block of an allgather may start anywhere
        return Sparse(head.view(torch.uint16).to(torch.int64), tail.view(self.dtype).to(torch.float32), numel)


FP32 = WireFormat()
