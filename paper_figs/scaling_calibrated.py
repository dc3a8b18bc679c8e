"""(d) calibrated mode of paper_figs/fig_scaling.py: for each paper model, effective constants (compute,
top-k selection time, network alpha and beta; `scaling_fit.fit_nonnegative`) fitted to the paper's dense,
Top-k and gTop-k times at P = 4 and 8 together, then P = 16 and 32 predicted:
scaling_calibrated_points.csv (every point), scaling_calibrated_errors.csv (held-out errors per model and
scheme, with the fit-free growth test that says why a miss cannot be fixed by any constants) and
scaling_calibrated_constants.csv (the constants against the cluster's and the paper's breakdown). The
errors CSV and table also hold what the fit has to beat, each from one curve's own P = 4, 8 times
(`baseline_predictions`): the naive "mean" (t4 + t8) / 2 and "log-line" (the line in log2 P), and
"pinned": alpha and beta fixed to the measured testbed link (TESTBED_LINK; --link ALPHA BETA or
--link-from a conf/cluster-style YAML for another) with one constant c >= 0 per scheme fitted; then one
line counting the pairs each gets within 25 %.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from omegaconf import OmegaConf

import scaling_fit as fit
from figlib import write_csv
from scaling_model import model_scheme
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.iteration import Profile, SchemeCost, iteration_seconds, iteration_time
from ssgd.perf.paper import P_SCALING, SCALING_SCHEMES, PaperModel

FIT_P, HELD_OUT, GOAL = (4, 8), (16, 32), 0.25       # calibrated mode: fitted and predicted P, error goal
GROWTH_P = (*FIT_P, HELD_OUT[-1])                    # the fit-free growth test: (t32 - t8) / (t8 - t4)
# The measured testbed link: mpi4py ping-pong between hosts 1 and 2 of the 1 Gbit/s testbed
# (`make alphabeta-testbed`, fitted by regime, `ssgd.perf.alphabeta.fit_alpha_beta_regimes`; the
# measurement is in docs/testbed.md). The "pinned" predictor fixes alpha and beta to these (or to --link /
# --link-from).
TESTBED_ALPHA_S, TESTBED_BETA_S_PER_BYTE = 2.54e-5, 8.44e-9
TESTBED_LINK = AlphaBeta(TESTBED_ALPHA_S, TESTBED_BETA_S_PER_BYTE)
PREDICTORS = (("mean", "mean"), ("logline", "log-line"), ("pinned", "pinned"))   # CSV prefix, printed name


@dataclass(frozen=True)
class Calibration:
    """The iteration model with effective constants fitted to one paper model's P = 4, 8 times.

    constants: `scaling_fit` names -> value (compute_s, selection_s[exact_topk], alpha_s,
    beta_s_per_byte); schemes: the model's scheme of each of the paper's curves (SCALING_SCHEMES).
    """

    paper: PaperModel
    d: int
    schemes: MappingProxyType
    constants: MappingProxyType

    def profile(self) -> Profile:
        """A one-layer profile holding the fitted compute (t_f = t_b / 2) and selection times."""
        compute = self.constants.get(fit.COMPUTE, 0.0)
        return Profile(name=f"{self.paper.name}-calibrated", batch_size=self.paper.batch_size, layers=("all",),
                       params=(self.d,), forward_s=(compute / 3,), backward_s=(compute * 2 / 3,),
                       select_s=self.constants.get(fit.selection_key("exact_topk"), 0.0),
                       threshold_select_s=self.constants.get(fit.selection_key("linear"), 0.0),
                       derivation="fitted by paper_figs/fig_scaling.py to the gTop-k paper's P = "
                                  f"{' and '.join(map(str, FIT_P))} times")

    def network(self) -> AlphaBeta:
        return AlphaBeta(self.constants.get(fit.ALPHA, 0.0), self.constants.get(fit.BETA, 0.0))

    def seconds(self, scheme: str, P: int) -> float:
        """Calibrated seconds per iteration: the iteration model on the fitted profile and network."""
        return iteration_seconds(self.profile(), self.schemes[scheme], self.network(), P)

    def efficiency(self, scheme: str, P: int) -> float:
        """v_P / v_1 with the paper's v_1, as the paper's markers."""
        return self.paper.batch_size / self.seconds(scheme, P) / self.paper.v1

    def comm_seconds(self, scheme: str, P: int) -> float:
        """The scheme's communication with the fitted alpha and beta."""
        return iteration_time(self.profile(), self.schemes[scheme], self.network(), P).comm_s


def calibrate(pm: PaperModel, d: int) -> Calibration:
    """Fit compute, top-k selection, alpha and beta (all >= 0) to the paper's dense, Top-k and gTop-k
    seconds per iteration at P = FIT_P, the schemes as conf/compressor builds them for d parameters."""
    schemes = {s: model_scheme(s, d) for s in SCALING_SCHEMES}
    rows, times = [], []
    for s in SCALING_SCHEMES:
        for P, t in zip(P_SCALING, pm.seconds(s)):
            if P in FIT_P:
                rows.append(fit.features(schemes[s], P, d))
                times.append(t)
    return Calibration(pm, d, MappingProxyType(schemes), MappingProxyType(fit.fit_nonnegative(rows, times)))


def best_single_scheme_error(scheme: SchemeCost, pm: PaperModel, name: str, d: int) -> float:
    """Largest |relative error| of the best fit of c + alpha L + beta B (>= 0) to all four paper points
    of one scheme: how close any constants of this collective can come."""
    rows = [{k: v for k, v in fit.features(scheme, P, d).items() if not k.startswith("selection")}
            for P in P_SCALING]
    times = pm.seconds(name)
    constants = fit.fit_nonnegative(rows, times)
    return max(abs(fit.predict(r, constants) / t - 1) for r, t in zip(rows, times))


def baseline_predictions(pm: PaperModel, name: str, scheme: SchemeCost, d: int,
                         link: AlphaBeta = TESTBED_LINK) -> tuple[dict[str, dict[int, float]], float]:
    """What a calibrated model has to beat, for one paper curve (`name`), from its P = FIT_P times only.

    Returns ({predictor: {P: seconds} at P_SCALING}, c) for the predictors of PREDICTORS:
      * "mean": t(P) = mean(t4, t8), the same at every P;
      * "logline": the straight line through (log2 4, t4) and (log2 8, t8), at log2 P;
      * "pinned": t(P) = c + alpha L_s(P) + beta B_s(P) with alpha and beta pinned to `link` (the
        measured testbed link by default) and only c >= 0 (compute + selection + any P-independent
        overhead of this scheme) fitted to t4 and t8 in relative least squares
        (`scaling_fit.fit_pinned_constant`); L_s, B_s as in `scaling_fit.latency_and_bytes`.
    """
    paper = dict(zip(P_SCALING, pm.seconds(name)))
    fitted = [paper[P] for P in FIT_P]
    comm = {P: link.alpha * L + link.beta * B
            for P in P_SCALING for L, B in [fit.latency_and_bytes(scheme, P, d)]}
    c = fit.fit_pinned_constant([comm[P] for P in FIT_P], fitted)
    mean = fit.mean_of(fitted)
    return {"mean": {P: mean for P in P_SCALING},
            "logline": {P: fit.log2_line(FIT_P[0], fitted[0], FIT_P[1], fitted[1], P) for P in P_SCALING},
            "pinned": {P: c + comm[P] for P in P_SCALING}}, c


def baseline_columns(pm: PaperModel, name: str, scheme: SchemeCost, d: int, link: AlphaBeta = TESTBED_LINK) -> dict:
    """The CSV columns of `baseline_predictions`: each predictor's held-out errors and whether both are
    within GOAL (the rule of held_out_within_goal), the pinned link, its fitted c and its fit errors."""
    pred, c = baseline_predictions(pm, name, scheme, d, link)
    paper = dict(zip(P_SCALING, pm.seconds(name)))
    row: dict = {}
    for key, _ in PREDICTORS:
        err = {P: pred[key][P] / paper[P] - 1 for P in HELD_OUT}
        row.update({f"{key}_error_P{P}": err[P] for P in HELD_OUT})
        row[f"{key}_within_goal"] = all(abs(e) <= GOAL for e in err.values())
    row.update({f"pinned_error_P{P}": pred["pinned"][P] / paper[P] - 1 for P in FIT_P})
    row.update({"pinned_constant_s": c, "pinned_alpha_s": link.alpha, "pinned_beta_s_per_byte": link.beta})
    return row


def calibrated_rows(cal: Calibration, link: AlphaBeta = TESTBED_LINK) -> list[dict]:
    """One row per scheme: errors at every P, the growth test and, for a miss, the measured reason;
    then the naive and pinned-link predictors' columns (`baseline_columns`, alpha and beta = `link`)."""
    pm, out = cal.paper, []
    for s in SCALING_SCHEMES:
        paper = dict(zip(P_SCALING, pm.seconds(s)))
        err = {P: cal.seconds(s, P) / paper[P] - 1 for P in P_SCALING}
        t1, t2, t3 = (paper[P] for P in GROWTH_P)
        growth = fit.growth_ratio(t1, t2, t3)
        lo, hi = fit.growth_range(cal.schemes[s], GROWTH_P, cal.d)
        # any model through the paper's P = 4 and 8 points has t32 in t8 + [lo, hi] (t8 - t4)
        reach = [t2 + g * (t2 - t1) for g in (lo, hi)]
        bound = 0.0 if reach[0] <= t3 <= reach[1] else min((r / t3 - 1 for r in reach), key=abs)
        best = best_single_scheme_error(cal.schemes[s], pm, s, cal.d)
        ok = all(abs(err[P]) <= GOAL for P in HELD_OUT)
        if ok:
            reason = ""
        elif math.isnan(growth):
            reason = f"the paper's time does not grow from P = 4 to 8 ({t1:.4g} -> {t2:.4g} s)"
        elif not lo <= growth <= hi:
            allowed = f"{lo:.3g}" if hi == lo else f"{lo:.3g} to {hi:.3g}"
            reason = f"paper's (t32 - t8) / (t8 - t4) = {growth:.3g}, this collective's alpha-beta model allows {allowed}: "
            if abs(bound) > GOAL:
                reason += (f"any model through the paper's P = 4, 8 points is off by {bound:+.0%} or more at P = 32 "
                           f"(fitted to all four points, not a prediction: {best:.0%})")
            else:
                reason += (f"the best a model through the paper's P = 4, 8 points can do at P = 32 is {bound:+.0%}; "
                           f"the joint fit (constants shared with dense and gTop-k) gives {err[32]:+.0%}")
        elif best > GOAL:
            reason = f"no constants fit all four paper points within {GOAL:.0%} (best: {best:.0%})"
        else:
            reason = (f"the constants shared with the other schemes: this scheme alone fits all four points "
                      f"within {best:.0%}")
        out.append({"model": pm.name, "scheme": s, **{f"error_P{P}": err[P] for P in P_SCALING},
                    "held_out_within_goal": ok, "paper_growth_4_8_32": growth, "model_growth_min": lo,
                    "model_growth_max": hi, "P32_error_bound_through_P4_P8": bound,
                    "best_fit_all_P_max_error": best, "reason": reason,
                    **baseline_columns(pm, s, cal.schemes[s], cal.d, link)})
    return out


def constants_row(cal: Calibration, cluster: AlphaBeta) -> dict:
    """The fitted constants next to the cluster's alpha-beta and the paper's own numbers."""
    pm, c = cal.paper, cal.constants
    comm = cal.comm_seconds("gtopk", 32)
    breakdown = pm.breakdown_s[2] if pm.breakdown_s else math.nan
    return {"model": pm.name, "d": cal.d, "compute_s": c.get(fit.COMPUTE, 0.0), "paper_bs_over_v1_s": pm.batch_size / pm.v1,
            "selection_s": c.get(fit.selection_key("exact_topk"), 0.0),
            "paper_breakdown_compression_s": pm.breakdown_s[1] if pm.breakdown_s else math.nan,
            "alpha_s": c.get(fit.ALPHA, 0.0), "beta_s_per_byte": c.get(fit.BETA, 0.0),
            "cluster_alpha_s": cluster.alpha, "cluster_beta_s_per_byte": cluster.beta,
            "gtopk_comm_P32_fitted_s": comm, "paper_breakdown_comm_P32_s": breakdown,
            "breakdown_over_fitted_comm": breakdown / comm if comm > 0 else math.nan,
            "gtopk_P32_paper_s": pm.seconds("gtopk")[-1], "gtopk_P32_calibrated_s": cal.seconds("gtopk", 32)}


def write_calibrated(cals: list[Calibration], cluster: AlphaBeta, out: Path,
                     link: AlphaBeta = TESTBED_LINK) -> list[Path]:
    """The three calibrated-mode CSVs (module docstring (d)); prints their tables."""
    points = [[cal.paper.name, s, P, "fit" if P in FIT_P else "held-out", t, cal.seconds(s, P), cal.seconds(s, P) / t - 1]
              for cal in cals for s in SCALING_SCHEMES for P, t in zip(P_SCALING, cal.paper.seconds(s))]
    errors = [row for cal in cals for row in calibrated_rows(cal, link)]
    consts = [constants_row(cal, cluster) for cal in cals]
    paths = [out / "scaling_calibrated_points.csv", out / "scaling_calibrated_errors.csv",
             out / "scaling_calibrated_constants.csv"]
    write_csv(paths[0], ["model", "scheme", "P", "role", "paper_s", "calibrated_s", "error"], points)
    write_csv(paths[1], list(errors[0]), [list(r.values()) for r in errors])
    write_csv(paths[2], list(consts[0]), [list(r.values()) for r in consts])
    print_calibrated(errors, consts)
    return paths


def print_calibrated(errors: list[dict], consts: list[dict]) -> None:
    print(f"\nCalibrated mode: constants fitted to the paper's P = {FIT_P[0]}, {FIT_P[1]} (dense, Top-k, gTop-k "
          f"together), P = {HELD_OUT[0]}, {HELD_OUT[1]} held out; goal |error| <= {GOAL:.0%}")
    print("| model | scheme | fit P=4 | fit P=8 | held-out P=16 | held-out P=32 | within goal | reason for a miss |")
    print("|---|---|---|---|---|---|---|---|")
    for r in errors:
        print(f"| {r['model']} | {r['scheme']} | {r['error_P4']:+.1%} | {r['error_P8']:+.1%} | {r['error_P16']:+.1%} | "
              f"{r['error_P32']:+.1%} | {'yes' if r['held_out_within_goal'] else 'no'} | {r['reason']} |")
    print_baselines(errors)
    print("\n| model | compute s (fit / paper bs/v1) | selection s (fit / paper breakdown) | alpha ms | beta ns/B "
          "| gTop-k comm P=32: fitted ms / paper breakdown ms (ratio) |")
    print("|---|---|---|---|---|---|")
    for c in consts:
        ratio = "-" if math.isnan(c["breakdown_over_fitted_comm"]) else f"{c['breakdown_over_fitted_comm']:.0f}x"
        print(f"| {c['model']} | {c['compute_s']:.4g} / {c['paper_bs_over_v1_s']:.4g} | {c['selection_s']:.4g} / "
              f"{c['paper_breakdown_compression_s']:.4g} | {c['alpha_s'] * 1e3:.3g} | {c['beta_s_per_byte'] * 1e9:.3g} | "
              f"{c['gtopk_comm_P32_fitted_s'] * 1e3:.3g} / {c['paper_breakdown_comm_P32_s'] * 1e3:.4g} ({ratio}) |")


def baseline_counts(errors: list[dict]) -> str:
    """The summary line: how many (model, scheme) pairs each predictor gets within GOAL at both
    held-out P (calibrated: held_out_within_goal; the others: `baseline_columns`)."""
    counts = [f"calibrated {sum(bool(r['held_out_within_goal']) for r in errors)} of {len(errors)}"]
    counts += [f"{label} {sum(bool(r[f'{key}_within_goal']) for r in errors)}" for key, label in PREDICTORS]
    return f"held-out (model, scheme) pairs within {GOAL * 100:.0f} %: " + ", ".join(counts)


def print_baselines(errors: list[dict]) -> None:
    """The naive and pinned-link predictors' held-out errors beside the calibrated fit's, and the counts."""
    r0 = errors[0]
    print(f"\nWhat the calibrated fit has to beat (from the paper's P = {FIT_P[0]}, {FIT_P[1]} times of each curve "
          f"alone): mean = mean(t{FIT_P[0]}, t{FIT_P[1]}); log-line = the line in log2 P through them; pinned = "
          f"c + alpha L(P) + beta B(P), alpha = {r0['pinned_alpha_s'] * 1e6:.4g} us, "
          f"beta = {r0['pinned_beta_s_per_byte'] * 1e9:.4g} ns/B pinned, c >= 0 fitted")
    cols = " | ".join(f"{label} P={P}" for _, label in (("calibrated", "calibrated"), *PREDICTORS) for P in HELD_OUT)
    print(f"| model | scheme | {cols} | pinned c s | pinned fit P={FIT_P[0]}, {FIT_P[1]} |")
    print("|---|---|" + "---|" * (2 * (len(PREDICTORS) + 1) + 2))
    for r in errors:
        cells = [f"{r[f'error_P{P}']:+.1%}" for P in HELD_OUT]
        cells += [f"{r[f'{key}_error_P{P}']:+.1%}" for key, _ in PREDICTORS for P in HELD_OUT]
        fit_err = ", ".join(f"{r[f'pinned_error_P{P}']:+.1%}" for P in FIT_P)
        print(f"| {r['model']} | {r['scheme']} | {' | '.join(cells)} | {r['pinned_constant_s']:.4g} | {fit_err} |")
    print(baseline_counts(errors))


def load_link(link: list[float] | None, link_from: str | None) -> AlphaBeta:
    """The pinned predictor's alpha and beta: --link ALPHA BETA, or network.alpha/beta of --link-from
    PATH (a conf/cluster-style YAML, as `make alphabeta-testbed` writes), else TESTBED_LINK.
    ValueError with a one-line reason naming the option when a value is missing, not a number or < 0."""
    if link is not None:
        where, values = "--link ALPHA BETA", link
    elif link_from is not None:
        where = f"--link-from {link_from}"
        if not Path(link_from).is_file():
            raise ValueError(f"{where}: no such file")
        try:
            cfg = OmegaConf.load(link_from)
            values = [cfg.network.alpha, cfg.network.beta]
        except Exception as err:        # noqa: BLE001 -- any YAML or key error becomes the one-line reason
            raise ValueError(f"{where}: needs network.alpha and network.beta "
                             f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from err
    else:
        return TESTBED_LINK
    try:
        alpha, beta = (float(v) for v in values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: alpha and beta must be numbers, got {values!r}") from err
    if not all(math.isfinite(v) and v >= 0 for v in (alpha, beta)):
        raise ValueError(f"{where}: alpha and beta must be finite and >= 0 (seconds per message, seconds per "
                         f"byte), got {alpha!r}, {beta!r}")
    return AlphaBeta(alpha, beta)

