"""A scheme from its configuration: a `compressor:` node (conf/compressor/<name>.yaml) in, a
`ssgd.loop.sync.Scheme` out.

The one place that turns a compressor config into objects, for the trainer (`ssgd.run.build.scheme`)
and the DDP hook (`ssgd.ddp`) alike; the algorithm (`ssgd.loop.sync`) takes the objects and never reads
a config node. A node composed by the app is typed by the schema (`ssgd.config.CompressorConfig`); a
file loaded without it (as `ssgd.ddp` loads conf/compressor/<name>.yaml) gets the same checks of its
wire settings here (`wire_of`), by the schema's own check functions.

Every bad value is a one-line ConfigError naming its key (`ssgd.config.config_errors`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hydra.utils import instantiate
from omegaconf import OmegaConf

from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.wire import WireFormat
from ssgd.compress.base import Compressor
from ssgd.config import (config_errors, check_min_compression, check_wire_values, locate, parameters_of)
from ssgd.errors import ConfigError
from ssgd.loop.sync import DensitySchedule, Scheme
from ssgd.utils.seeding import rank_generator


def build_scheme(c: Any, seed: int) -> Scheme:
    """The scheme of a `compressor:` node; rank r's compressor draws from the (seed, r, "compressor")
    stream. A vector goes dense under `min_compression` through a `DenseAllreduce` in the same wire format
    (none for a scheme whose collective is that already)."""
    make_compressor = compressor_factory(c, seed)
    make_memory = config_errors("compressor.memory", lambda: instantiate(c.memory), c.memory)
    wire, min_compression = wire_of(c)
    extra = {"values": wire.values} if wire.lossy else {}
    collective = config_errors("compressor.collective", lambda: instantiate(c.collective, **extra), c.collective)
    density = config_errors("compressor", lambda: DensitySchedule(c.density, tuple(c.density_warmup or ())), c)
    dense = None if isinstance(collective, DenseAllreduce) else DenseAllreduce(wire.values)
    config_errors("compressor.compress", lambda: make_compressor(0), c.compress)     # the constructor's own checks
    return Scheme(name=c.name, make_compressor=make_compressor,
                  make_memory=lambda d, device="cpu": make_memory(d=d, device=device),
                  collective=collective, density=density, wire=wire, min_compression=min_compression,
                  dense=dense)


def compressor_factory(c: Any, seed: int) -> Callable[[int], Compressor]:
    """rank -> that rank's compressor of node `c`, drawing from the (seed, rank, "compressor") stream (the
    compressor's constructor runs at each call: `build_scheme` calls it once for its checks)."""
    make_compress = config_errors("compressor.compress", lambda: instantiate(c.compress), c.compress)

    def make_compressor(rank: int) -> Compressor:
        return make_compress(generator=rank_generator(seed, rank, "compressor"))

    return make_compressor


def collective_takes(c: Any, name: str) -> bool:
    """Whether the class of node `c`'s `collective._target_` takes the keyword `name` (e.g. `values`,
    `narrow_indices`), read from its signature without building it."""
    return name in parameters_of(locate(str(c.collective._target_), "compressor.collective"))[0]


def wire_of(c: Any) -> tuple[WireFormat, float]:
    """(wire format, min_compression) of a `compressor:` node; a node without `wire` or `min_compression`
    gets fp32 and 0. ConfigError naming the key for a value outside the allowed ones
    (`ssgd.config.check_wire_values`, `check_min_compression`), for `compressor.collective.values` (the key
    is `compressor.wire.values`), or for 16-bit values with a collective that takes no `values`."""
    values = check_wire_values(str(OmegaConf.select(c, "wire.values", default="fp32")))
    rule = check_min_compression(OmegaConf.select(c, "min_compression", default=0.0))
    if OmegaConf.select(c, "collective.values") is not None:
        raise ConfigError("compressor.collective.values: set compressor.wire.values instead (one key for the "
                          "scheme's wire format)")
    if values != "fp32" and not collective_takes(c, "values"):
        raise ConfigError(f"compressor.wire.values={values}: {c.collective._target_} has no 16-bit wire format "
                          "(it takes no `values`); allowed with it: fp32")
    return WireFormat(values), rule
