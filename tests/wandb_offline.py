"""Read back what an offline wandb run recorded, from its `run-<id>.wandb` file (no server, no wandb API).

The file is wandb's transaction log: a 7-byte header (b":W&B", magic 0xBEE1, version) and then
LevelDB-log framing (32 KiB blocks; each chunk: CRC32 u32, length u16, type u8 = FULL 1 / FIRST 2 /
MIDDLE 3 / LAST 4; a block tail shorter than a chunk header is zero padding) around protobuf `Record`s
(wandb.proto.wandb_internal_pb2). Written independently of wandb's writer, so a test of what we log
does not read it back through the code that wrote it.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = struct.Struct("<4sHB")
CHUNK = struct.Struct("<IHB")


def records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    ident, magic, _ = HEADER.unpack_from(data)
    assert ident == b":W&B" and magic == 0xBEE1, f"{path}: not a wandb transaction log"
    pos, pending = HEADER.size, b""
    while pos + CHUNK.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK.size:
            pos += left
            continue
        _, length, kind = CHUNK.unpack_from(data, pos)
        if kind == 0:                       # zero padding to the end of the block
            pos += left
            continue
        pending += data[pos + CHUNK.size:pos + CHUNK.size + length]
        pos += CHUNK.size + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def offline_run(run_dir: Path) -> dict[str, Any]:
    """name, group, tags, config (nested, as logged), defined metrics {name: summary kinds} and the final
    summary of the one offline run under `run_dir/wandb`."""
    files = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    out: dict[str, Any] = {"config": {}, "metrics": {}, "summary": {}}
    for record in records(files[0]):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out.update(name=record.run.display_name, group=record.run.run_group, tags=list(record.run.tags))
            out["config"].update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "config":
            out["config"].update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "metric" and record.metric.name:
            s = record.metric.summary
            out["metrics"][record.metric.name] = {k for k in ("min", "max", "last", "mean", "best") if getattr(s, k)}
        elif kind == "summary":
            for item in record.summary.update:
                key = item.key or "/".join(item.nested_key)
                out["summary"][key] = json.loads(item.value_json)
    return out
