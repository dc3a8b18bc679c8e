"""The iteration model's `SchemeCost` of a compressor config: conf/compressor/<name>.yaml -> `ssgd.perf`.

A scheme is read from its YAML, never listed here, so a new compressor config shows up in the
scaling figures and the model validation without editing `ssgd.perf`:

  * collective: `hydra.utils.instantiate` of the YAML's ``collective`` node, in the YAML's wire format
    (``wire.values``, `ssgd.scheme_config.wire_of`; its `model_seconds` is the communication the trainer logs);
  * selection cost kind: the ``selection_cost`` class attribute of the YAML's ``compress._target_``
    class (`ssgd.compress.base.Compressor`), read without building the compressor;
  * entries per rank: k = max(int(d * density), 1) (`ssgd.compress.sparse.k_of`, as both released
    code bases), density the YAML's unless given; times `count_factor` for a compressor whose count is
    not trimmed to k (Gaussian-k: achieved density / target density, measured by the caller). A k of d
    (density 1, the dense config) is a dense payload.
"""
from __future__ import annotations

from hydra.utils import get_class, instantiate
from omegaconf import DictConfig

from ssgd.compress.sparse import k_of
from ssgd.config import check_density, compressor_config, compressor_names
from ssgd.scheme_config import wire_of
from ssgd.perf.iteration import SELECTION_COSTS, SchemeCost

LAYERWISE = "dense_wfbp"       # label of the dense config with layer-wise overlap (not a compressor config)
names, load_config = compressor_names, compressor_config      # the shipped compressor configs (ssgd.config)


def selection_cost(cfg: DictConfig, name: str = "?") -> str:
    """The selection cost kind of the config's compressor class (a key of `SELECTION_COSTS`)."""
    cls = get_class(cfg.compress._target_)
    kind = getattr(cls, "selection_cost", None)
    if kind not in SELECTION_COSTS:
        raise ValueError(f"compressor {name!r}: {cls.__qualname__}.selection_cost = {kind!r}; "
                         f"it must be one of {', '.join(SELECTION_COSTS)}")
    return kind


def scheme(name: str, d: int, density: float | None = None, count_factor: float = 1.0,
           layerwise_overlap: bool = False) -> SchemeCost:
    """The model's scheme of compressor config `name` for a d-parameter model (module docstring).

    density: the YAML's ``density`` when None; must be in (0, 1]. count_factor > 0 scales k.
    layerwise_overlap: one call of the collective per layer, overlapped with backward (WFBP; the
    paper's Horovod baseline overlaps, the trainer does not): a dense payload only, labelled
    "dense_wfbp". ValueError on bad input.
    """
    cfg = load_config(name)
    rho = check_density(cfg.density if density is None else density, f"compressor {name!r}: density")
    if not count_factor > 0:
        raise ValueError(f"compressor {name!r}: count_factor={count_factor!r} must be > 0 "
                         "(achieved density / target density)")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d={d!r}: must be an int >= 1 (model parameters)")
    k = k_of(d, rho)
    count = None if k == d else max(1, round(count_factor * k))
    wire, _ = wire_of(cfg)
    collective = instantiate(cfg.collective, **({"values": wire.values} if wire.lossy else {}))
    return SchemeCost(collective=collective, selection=selection_cost(cfg, name), count=count,
                  layerwise_overlap=layerwise_overlap, name=LAYERWISE if layerwise_overlap else name)

