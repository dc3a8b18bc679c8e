"""gTop-k's two residual rules side by side: final accuracy, and how much the released rule drops.

    python paper_figs/gtopk_residual.py [--seeds 0 1 2] [--P 4 8] [--out paper_figs/out] [OVERRIDE ...]

Trains the default job (`python src/train.py`: FNN-3 on the embedded MNIST digits, gTop-k at density
0.001) once per (P, seed, rule), with `compressor.collective.residual=released|strict` and any extra
Hydra overrides, in this process (threads backend). Every step it measures, from the ranks' payloads
and the collective's results, the values that counted as sent at an index of the global set I_g but
are not part of the global sum V_g (a rank's value dropped in an intermediate merge):

    dropped = sum_r sent_r - V_g   (float64, over I_g),  share = ||dropped|| / ||V_g||.

Under `released` those values are lost (neither applied nor kept); under `strict` they are not sent,
stay in the residual and come back later (measured the same way, the share is then 0 by construction;
`deferred` reports their size: sum_r payload_r at I_g - V_g). Writes gtopk_residual.csv (one row per
run) and prints a markdown table with the mean and [min-max] over seeds. docs/compressors.md quotes it.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

COLUMNS = ["P", "seed", "rule", "steps", "val_acc", "dropped_share_mean", "dropped_share_max", "deferred_share_mean",
           "wall_s"]


def dense64(payload, d: int):
    import torch

    return payload.to_dense().double() if payload.count else torch.zeros(d, dtype=torch.float64)


def run(P: int, seed: int, rule: str, overrides: list[str]) -> dict:
    """One training run; returns its row."""
    from hydra import compose, initialize_config_dir

    from ssgd.run import build

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "wandb.mode=disabled", "trainer.progress=false", f"cluster.world_size={P}", f"seed={seed}",
            f"compressor.collective.residual={rule}", *overrides])
    with tempfile.TemporaryDirectory() as tmp:
        trainer, writer, world = build.trainer(cfg, Path(tmp))
        d = trainer.d
        dropped, deferred = [], []
        collective = world.collective

        def measured(coll, payloads):
            results, logs = collective(coll, payloads)
            applied = results[0].total.to_dense().double()
            norm = float(applied.norm()) or 1.0
            sent = sum(dense64(res.sent(p), d) for res, p in zip(results, payloads))
            at_global = sum(dense64(p.restrict(results[0].total.indices()), d) for p in payloads)
            dropped.append(float((sent - applied).norm()) / norm)
            deferred.append(float((at_global - applied).norm()) / norm)
            return results, logs

        world.collective = measured
        start = time.perf_counter()
        try:
            summary = trainer.fit()
        finally:
            world.close()
            writer.close()
    return {"P": P, "seed": seed, "rule": rule, "steps": summary["steps"], "val_acc": summary["val/acc"],
            "dropped_share_mean": statistics.fmean(dropped), "dropped_share_max": max(dropped),
            "deferred_share_mean": statistics.fmean(deferred), "wall_s": time.perf_counter() - start}


def table(rows: list[dict]) -> list[str]:
    out = ["| P | rule | seeds | final val acc, mean [min-max] | dropped / update norm, mean over steps "
           "| not applied (deferred or dropped) / update norm |", "|---|---|---|---|---|---|"]
    for P in sorted({r["P"] for r in rows}):
        for rule in ("released", "strict"):
            rs = [r for r in rows if r["P"] == P and r["rule"] == rule]
            if not rs:
                continue
            acc = [r["val_acc"] for r in rs]
            out.append(f"| {P} | {rule} | {len(rs)} | {statistics.fmean(acc):.4f} [{min(acc):.4f}-{max(acc):.4f}] "
                       f"| {statistics.fmean(r['dropped_share_mean'] for r in rs):.1%} "
                       f"| {statistics.fmean(r['deferred_share_mean'] for r in rs):.1%} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--P", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--rules", nargs="+", default=["released", "strict"], choices=["released", "strict"])
    ap.add_argument("--out", type=Path, default=ROOT / "paper_figs" / "out")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. trainer.epochs=20")
    args = ap.parse_args(argv)
    if any(P < 1 for P in args.P):
        print(f"error: --P {args.P}: must be >= 1", file=sys.stderr)
        return 2
    rows = []
    for P in args.P:
        for seed in args.seeds:
            for rule in args.rules:
                row = run(P, seed, rule, args.overrides)
                rows.append(row)
                print(f"[gtopk_residual] P={P} seed={seed} {rule}: val acc {row['val_acc']:.4f}, dropped "
                      f"{row['dropped_share_mean']:.1%} of the update norm, {row['wall_s']:.0f} s", file=sys.stderr,
                      flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "gtopk_residual.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print("\n".join(table(rows)))
    print(f"wrote {args.out / 'gtopk_residual.csv'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
