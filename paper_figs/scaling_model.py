"""What the scaling figures share (paper_figs/fig_scaling.py): the schemes as conf/compressor builds them,
the clusters' alpha-beta constants, the profiles to plot and the paper's efficiencies.

Paper: Shi et al., ICDCS 2019 (arXiv:1901.04359); its numbers (`ssgd.perf.paper`) are those of the
authors' plotting script hclhkbu/gtopkssgd scripts/icdcs2019/communication.py. The schemes are read
from conf/compressor/<name>.yaml (`ssgd.tools.scheme_costs`) at each YAML's density (0.001).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from omegaconf import OmegaConf

from ssgd.perf import profiles
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.iteration import Profile, SchemeCost
from ssgd.perf.paper import PAPER_MODELS, SCALING_SCHEMES, paper_model
from ssgd.tools import scheme_costs as conf_schemes

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = (("1GbE", "32x1gbe"), ("10GbE", "32x10gbe"))
P_MODEL = tuple(2**i for i in range(2, 11))          # 4 ... 1024
# (scheme, legend label); how each is drawn: paper_figs/style.py SERIES
SCHEMES = (("dense", "Dense (no overlap)"), ("dense_wfbp", "Dense, layer-wise WFBP"), ("topk", "Top-k"),
           ("gtopk", "gTop-k"), ("gaussiank", "Gaussian-k"))
PAPER_LABEL = MappingProxyType({"dense": "Dense (Horovod)", "topk": "Top-k", "gtopk": "gTop-k"})


@lru_cache(maxsize=None)
def model_scheme(label: str, d: int) -> SchemeCost:
    """The model's scheme of a SCHEMES label for a d-parameter model: conf/compressor/<label>.yaml at
    its density; "dense_wfbp" is dense.yaml with the layer-wise overlapped allreduce."""
    if label == conf_schemes.LAYERWISE:
        return conf_schemes.scheme("dense", d, layerwise_overlap=True)
    return conf_schemes.scheme(label, d)


def load_network(cluster: str) -> AlphaBeta:
    """alpha/beta (seconds, seconds per byte) of conf/cluster/<cluster>.yaml."""
    cfg = OmegaConf.load(ROOT / "conf" / "cluster" / f"{cluster}.yaml")
    return AlphaBeta(float(cfg.network.alpha), float(cfg.network.beta))


def paper_efficiency(name: str) -> dict[str, list[float]]:
    """eff(P) = v_P / v_1 of the paper's lists at P = 4, 8, 16, 32 (`realdata_speedup`)."""
    pm = paper_model(name)
    return {scheme: list(pm.efficiency(scheme)) for scheme in SCALING_SCHEMES}


def density_label() -> str:
    """The sparse schemes' densities of conf/compressor (one value, e.g. "0.001", when they agree)."""
    values = sorted({float(conf_schemes.load_config(s).density) for s, *_ in SCHEMES
                     if s != conf_schemes.LAYERWISE and float(conf_schemes.load_config(s).density) < 1})
    return "/".join(f"{v:g}" for v in values)



def shipped_profiles() -> list[Profile]:
    """The shipped profiles, in the paper's model order."""
    order = [pm.name for pm in PAPER_MODELS]
    names = sorted(profiles.names(), key=lambda n: (order.index(n) if n in order else len(order), n))
    return [profiles.load(n) for n in names]


def load_profile_files(paths: list[str], taken: list[Profile]) -> list[Profile]:
    """The profiles in `paths` (JSON written by `python -m ssgd.tools.measure ... out=PATH` or
    `Profile.save`); ValueError with a one-line reason naming the file when one is missing, is not
    a profile, or reuses the name of a profile already plotted (`taken`, then earlier files)."""
    out: list[Profile] = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"--profile {path}: no such file")
        try:
            prof = Profile.load(path)
        except (OSError, ValueError) as err:
            raise ValueError(f"--profile {path}: not a profile: {err}") from err
        if any(p.name == prof.name for p in (*taken, *out)):
            raise ValueError(f"--profile {path}: profile name {prof.name!r} is already plotted; "
                             f"change the file's \"name\"")
        out.append(prof)
    return out

