"""bench/fsdp_convergence.py: the grid it runs, the batches each rank draws, the warm-up, the summary's arithmetic,
its one-line errors; and (slow) one tiny grid end to end on 2 gloo ranks."""
import csv
import subprocess
import sys

import pytest
import torch

from tests.bench_modules import BENCH, load

fc = load("fsdp_convergence")


def test_the_default_grid_runs_fsdp_and_ddp_back_to_back_for_every_cell():
    grid = fc.cells(fc.parse([]))
    assert len(grid) == 2 * 2 * 3 * 2
    for fsdp, ddp in zip(grid[::2], grid[1::2]):
        assert (fsdp["system"], ddp["system"]) == ("fsdp", "ddp")
        assert {k: v for k, v in fsdp.items() if k != "system"} == {k: v for k, v in ddp.items() if k != "system"}
    assert {(c["model"], c["density"], c["seed"]) for c in grid} == {
        (m, r, s) for m in ("fnn3", "cnn") for r in (0.01, 0.001) for s in (1, 2, 3)}
    assert {c["epochs"] for c in grid if c["model"] == "fnn3"} == {12}
    assert {c["epochs"] for c in grid if c["model"] == "cnn"} == {10}


def test_each_rank_draws_every_sample_of_its_half_once_per_epoch():
    n, batch, epochs = 4000, 32, 3
    picks = {r: fc.batches(n, r, batch, seed=2, epochs=epochs) for r in range(fc.P)}
    per_epoch = n // fc.P // batch
    for r, bs in picks.items():
        assert len(bs) == epochs * per_epoch and all(len(b) == batch for b in bs)
        for e in range(epochs):
            seen = torch.cat(bs[e * per_epoch:(e + 1) * per_epoch])
            assert len(set(seen.tolist())) == per_epoch * batch
            assert bool((seen % fc.P == r).all())
    assert not set(torch.cat(picks[0]).tolist()) & set(torch.cat(picks[1]).tolist())
    again = fc.batches(n, 0, batch, seed=2, epochs=epochs)
    assert all(torch.equal(a, b) for a, b in zip(again, picks[0]))
    assert not torch.equal(fc.batches(n, 0, batch, seed=3, epochs=1)[0], picks[0][0])


def test_the_learning_rate_warms_up_linearly_from_lr_over_p_over_the_first_epoch():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.4)
    warm = torch.optim.lr_scheduler.LambdaLR(opt, fc.warmup(per_epoch=10))
    lrs = []
    for _ in range(13):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        warm.step()
    assert lrs[0] == pytest.approx(0.4 / fc.P)
    assert lrs[5] == pytest.approx(0.4 / fc.P + (0.4 - 0.4 / fc.P) * 5 / 10)
    assert lrs[10:] == pytest.approx([0.4] * 3)


def row(system, seed, acc, wall, load0, load1, bytes_=6200, steps=62):
    return {"model": "fnn3", "d": "199210", "system": system, "density": "0.01", "seed": str(seed), "epochs": "1",
            "steps": str(steps), "val_acc": str(acc), "train_loss": "0.5", "bytes_rank0": str(bytes_),
            "wall_s": str(wall), "load_start": str(load0), "load_end": str(load1)}


def test_the_summary_gives_mean_min_max_over_seeds_and_the_load_range():
    rows = [row("fsdp", 1, 0.8, 10, 2.0, 3.0), row("fsdp", 2, 0.9, 20, 4.5, 1.5), row("fsdp", 3, 0.7, 30, 2, 2),
            row("ddp", 1, 0.5, 1, 1, 1)]
    lines = fc.summary(rows).splitlines()
    assert len(lines) == 2 + 2
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells == ["fnn3 (199,210)", "0.01", "fsdp", "3", "1 (62)", "0.800 [0.700, 0.900]", "0.5000", "100",
                     "20.0 [10.0, 30.0]", "1.5-4.5"]
    assert "| ddp | 1 |" in lines[3] and "0.500 [0.500, 0.500]" in lines[3]


def test_the_summary_keeps_fsdp_as_one_unit_apart_from_fsdp_per_layer():
    rows = [{**row("fsdp", 1, 0.8, 10, 1, 1), "fsdp_units": "layers"},
            {**row("fsdp", 1, 0.9, 10, 1, 1), "fsdp_units": "model"},
            {**row("fsdp", 1, 0.7, 10, 1, 1), "fsdp_units": "layers-global"}]
    lines = fc.summary(rows).splitlines()[2:]
    assert "| fsdp | 1 |" in lines[0] and "0.800" in lines[0]
    assert "| fsdp, one unit | 1 |" in lines[1] and "0.900" in lines[1]
    assert "| fsdp, global k | 1 |" in lines[2] and "0.700" in lines[2]


@pytest.mark.parametrize("argv, key", [(["--densities", "0"], "--densities 0"), (["--fnn3-epochs", "0"],
                                       "--fnn3-epochs 0"), (["--lr", "-1"], "--lr -1"), (["--models", "vgg"], "vgg")])
def test_bad_arguments_are_one_line_errors_with_exit_status_2(argv, key, capsys):
    with pytest.raises(SystemExit) as err:
        fc.parse(argv)
    assert err.value.code == 2
    assert key in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_tiny_grid_trains_both_systems_on_two_gloo_ranks(tmp_path):
    out = tmp_path / "grid.csv"
    proc = subprocess.run([sys.executable, str(BENCH / "fsdp_convergence.py"), "--models", "fnn3", "--densities",
                           "0.01", "--seeds", "1", "--fnn3-epochs", "1", "--out", str(out), "--timeout", "300"],
                          capture_output=True, text=True, timeout=360)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader(out.open()))
    assert [(r["system"], r["fsdp_units"]) for r in rows] == [("fsdp", "layers"), ("ddp", "")]
    for r in rows:
        assert int(r["d"]) == 199_210 and int(r["steps"]) == 62
        assert float(r["val_acc"]) > 0.5                          # well above chance (0.1) after one epoch
        assert 0 < int(r["bytes_rank0"]) < 62 * 4 * 199_210 // 10    # sparse: under a tenth of fp32 dense
    assert out.with_suffix(".md").read_text().count("| fnn3 (199,210) | 0.01 |") == 2
