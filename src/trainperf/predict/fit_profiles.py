"""Fit software-stack profiles to published (or a user's) runs, and judge them on held-out tables.

The physics stays in the step model (per-op FLOPs with recomputation per policy, collective
volumes, the pipeline bubble); a profile only moves a few knobs. The fit is hierarchical, in
the unbounded logit space of each knob's allowed range (:data:`~trainperf.predict.efficiency.KNOB_BOUNDS`):

``x(row, knob) = x_vendor(knob) + g[generation, knob] + g_all[knob] + d[stack, generation, knob] + d_all[stack, knob]``

* ``g`` / ``g_all``: the ``generic`` profile, shared by every stack (per GPU generation, and
  generation-independent knobs such as the per-kernel overhead), pulled weakly towards the
  vendor defaults;
* ``d`` / ``d_all``: each stack's deviation from ``generic``, pulled towards zero (shrinkage),
  so a stack with few rows stays close to ``generic`` and a stack with none *is* ``generic``.

The loss is a Huber loss on ``log(predicted / measured)`` step time with every table weighted
equally (its rows share one weight), minimised by Levenberg-Marquardt (Levenberg 1944;
Marquardt 1963) with a finite-difference Jacobian that re-evaluates only the rows a parameter
touches. Leave-one-table-out refits everything without the held-out table and predicts it with
its stack's profile; a stack seen on no other table is therefore predicted by ``generic`` fitted
without that table. The developer tool ``tools/fit_profiles.py`` refits the packaged profiles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainperf.errors import SpecError
from trainperf.predict import batch
from trainperf.predict.efficiency import KNOB_BOUNDS, KNOB_NAMES, check_knob_name, knob_logit, vendor_knobs
from trainperf.predict.holdout import Prediction, summarize
from trainperf.predict.stacks import (
    DEFAULT_STACK,
    Profile,
    generation_of,
    knobs_with_profiles,
    resolved_values,
)
from trainperf.predict.step_model import Layout, layout_of
from trainperf.predict.step_model.tensor_parallel import overlapped

GENERATION_KNOBS: tuple[str, ...] = ("matmul_fraction", "fp8_matmul_fraction")
"""Fitted per GPU generation (generic) and per stack and generation (deviations): the share of
the silicon's measured GEMM speed a stack keeps."""
GLOBAL_KNOBS: tuple[str, ...] = ("op_overhead_us", "overlap", "memory_bound_fraction")
"""Fitted once for generic and once per stack (deviation), for every generation."""
GENERIC_GLOBAL_KNOBS: tuple[str, ...] = ("compile_overhead_factor", "async_tp_overlap")
"""Fitted once for generic (every generation and stack), on the rows that use the feature: what
compilation saves of the launch cost, how much of the TP traffic async TP / TP comm overlap
hides.

``attention_fraction`` is not fitted: the attention kernels run at their measured speed
(efficiency.toml). Every packaged row has 8k tokens or fewer, where attention is 10-30% of a step
and its share trades against the GEMM shares and the context-parallel costs: fitted, it went
from 1.16 to 1.23 when the ring's costs were added, while held-out errors moved by 0.1 point
between 1.0 and 1.23; yet it sets the speed of every long-context prediction (attention is
65-85% of a step at 128k-256k). MagiAttention's 2025 H100 figures put current FA2, FA3 and
cuDNN kernels within -8% to +9% of the curves (docs/KERNELS.md, "Long context"): no share
beyond 1 that the kernel data support. A user's calibration may still move it
(:data:`USER_KNOBS`)."""
FIT_START: dict[str, float] = {"async_tp_overlap": 0.5}
"""Start of a fit for knobs whose neutral default is one of their bounds."""
_FEATURE_OF: dict[str, str] = {"compile_overhead_factor": "compiled", "async_tp_overlap": "tp_overlap"}
"""Knob -> the feature a row must have for the knob to move it (:func:`_uses`)."""


def _uses(lay: Layout, feature: str) -> bool:
    """Whether a row (its :class:`~trainperf.predict.step_model.layout.Layout`) uses ``feature``:
    ``compiled`` (a compiled step) or ``tp_overlap`` (TP collectives the stack overlaps)."""
    if feature == "tp_overlap":
        return bool(overlapped(lay.kernels.tp_overlap_rule, lay.run.async_tp, lay.mesh.sp))
    return bool(lay.kernels.compiled)


PRIOR_GENERIC = 1e-3
"""Pull of generic's parameters towards the vendor defaults (per unit logit, squared)."""
GENERATION_PRIOR = 1e-2
"""Pull of generic's per-generation GEMM-share residual towards its all-silicon share: kernel
physics should carry the difference between silicons, so a residual must earn its place."""
PRIOR_STACK = 4e-3
"""Pull of a stack's deviations towards generic."""
STACK_GENERATION_PRIOR_FACTOR = 2.0
"""A stack's per-generation deviation is pulled this much harder than its shared one."""
HUBER_DELTA = 0.05
"""Residuals (log step-time ratio) beyond 5% count linearly, so one odd row cannot drag a fit."""


@dataclass(frozen=True)
class FitRow:
    """One measured run to fit or predict."""

    name: str
    table: str
    stack: str
    workload: Any
    measured_step_time_s: float
    trainable_fraction: float = 1.0

    @property
    def generation(self) -> str:
        return generation_of(self.workload.hardware)

    @property
    def fp8(self) -> bool:
        return self.workload.precision in ("fp8", "fp4")


def _from_x(name: str, x: np.ndarray) -> np.ndarray:
    lo, hi = KNOB_BOUNDS[name]
    return lo + (hi - lo) / (1.0 + np.exp(-np.clip(x, -40.0, 40.0)))


@dataclass
class Problem:
    """Rows, their stacked features, and the parameter layout of one fit."""

    rows: list[FitRow]
    groups: list[batch.Group]
    base_x: dict[str, np.ndarray]
    """Knob -> per-row logit of the starting value (vendor defaults, or a base profile)."""
    fixed: dict[str, np.ndarray]
    """Knob -> per-row value of the knobs not fitted."""
    params: list[tuple[str, str, str]] = field(default_factory=list)
    """(level, key, knob): level ``generic`` or ``stack``; key a generation, ``stack/generation``,
    ``*`` or ``stack/*``."""
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    """Knob -> (rows x params) 0/1 matrix of which parameter moves which row."""
    param_groups: list[list[int]] = field(default_factory=list)
    prior: np.ndarray = field(default_factory=lambda: np.zeros(0))
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    measured: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def knob_values(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        out = dict(self.fixed)
        for k, m in self.masks.items():
            out[k] = _from_x(k, self.base_x[k] + m @ theta)
        return out

    def predict(self, theta: np.ndarray, only: Sequence[int] | None = None) -> np.ndarray:
        return batch.step_times(self.groups, self.knob_values(theta), len(self.rows), only)


@dataclass
class _Layout:
    """The parameters of a fit as they are added: (level, key, knob), a 0/1 row mask per fitted
    knob, and each one's prior weight."""

    rows: list[FitRow]
    fitted: tuple[str, ...]
    params: list[tuple[str, str, str]] = field(default_factory=list)
    cols: dict[str, list[np.ndarray]] = field(default_factory=dict)
    prior: list[float] = field(default_factory=list)

    def add(self, level: str, key: str, knob: str, mask: np.ndarray, weight: float) -> None:
        """A parameter of ``knob`` moving the rows of ``mask`` (none: no parameter)."""
        if not mask.any():
            return
        self.params.append((level, key, knob))
        for k in self.fitted:
            self.cols.setdefault(k, []).append(mask.astype(float) if k == knob else np.zeros(len(self.rows)))
        self.prior.append(weight)

    def masks(self) -> dict[str, np.ndarray]:
        n = len(self.rows)
        return {k: (np.stack(self.cols[k], axis=1) if self.cols.get(k) else np.zeros((n, 0))) for k in self.fitted}


def _generation_params(lay: _Layout, generation_knobs: Sequence[str], generic: bool, stacks: bool,
                       prior_generic: float, prior_stack: float) -> None:
    """The GEMM shares: generic's for every silicon plus each generation's residual over its
    kernel physics (pulled towards zero), and each stack's deviation shared by every generation
    plus a per-generation part shrunk harder (what a framework does better or worse partly
    carries over)."""
    rows = lay.rows
    gens, names = sorted({r.generation for r in rows}), sorted({r.stack for r in rows})
    gen_arr, stack_arr = np.array([r.generation for r in rows]), np.array([r.stack for r in rows])
    fp8_arr = np.array([r.fp8 for r in rows])
    for knob in generation_knobs:
        # fp8 rows read matmul_fraction too: their LM head is a 16-bit GEMM (layout.HEAD_16BIT_UNDER_FP8)
        sel = fp8_arr if knob == "fp8_matmul_fraction" else np.ones(len(rows), bool)
        if generic:
            lay.add("generic", "*", knob, sel, prior_generic)
            for g in gens:
                lay.add("generic", g, knob, (gen_arr == g) & sel, GENERATION_PRIOR)
        if stacks:
            for s in names:
                if s == DEFAULT_STACK:
                    continue
                lay.add("stack", f"{s}/*", knob, (stack_arr == s) & sel, prior_stack)
                for g in gens:
                    lay.add("stack", f"{s}/{g}", knob, (gen_arr == g) & (stack_arr == s) & sel,
                            STACK_GENERATION_PRIOR_FACTOR * prior_stack)


def _generic_params(lay: _Layout, feats: Sequence[Layout], generic_global_knobs: Sequence[str],
                    prior_generic: float) -> None:
    """Knobs fitted for generic only, once, on the rows that use the feature (a compiled step, TP
    overlap with tp > 1)."""
    rows = lay.rows
    for knob in generic_global_knobs:
        feature = _FEATURE_OF.get(knob)
        uses = np.array([bool(_uses(f, feature)) if feature else True for f in feats], dtype=bool)  # bool if empty
        if knob == "async_tp_overlap":
            uses &= np.array([r.workload.plan.tp > 1 for r in rows], dtype=bool)
        lay.add("generic", "*", knob, uses, prior_generic)


def _global_params(lay: _Layout, global_knobs: Sequence[str], generic: bool, stacks: bool, prior_generic: float,
                   prior_stack: float) -> None:
    """Knobs fitted once for generic and once per stack, for every generation."""
    stack_arr = np.array([r.stack for r in lay.rows])
    for knob in global_knobs:
        if generic:
            lay.add("generic", "*", knob, np.ones(len(lay.rows), bool), prior_generic)
        if stacks:
            for s in sorted({r.stack for r in lay.rows}):
                if s != DEFAULT_STACK:
                    lay.add("stack", f"{s}/*", knob, stack_arr == s, prior_stack)


def _param_groups(masks: Mapping[str, np.ndarray], groups: Sequence[batch.Group], n_rows: int,
                  n_params: int) -> list[list[int]]:
    """The row groups each parameter touches (a Jacobian column re-evaluates only those)."""
    group_of = np.empty(n_rows, int)
    for gi, grp in enumerate(groups):
        group_of[grp.index] = gi
    out = []
    for j in range(n_params):
        touched = np.zeros(n_rows, bool)
        for m in masks.values():
            touched |= m[:, j] != 0
        out.append(sorted(set(group_of[touched].tolist())))
    return out


def _table_weights(rows: Sequence[FitRow]) -> np.ndarray:
    """Every table weighted equally (its rows share one weight), averaging 1 over tables; none for
    no rows (a hold-out that leaves nothing to fit)."""
    if not rows:
        return np.zeros(0)
    tables = [r.table for r in rows]
    counts = {t: tables.count(t) for t in set(tables)}
    weights = np.array([1.0 / counts[t] for t in tables])
    return weights * (len(counts) / weights.sum())


def build_problem(rows: Sequence[FitRow], *, base: Sequence[Profile] = (), generic: bool = True,
                  stacks: bool = True, generation_knobs: Sequence[str] = GENERATION_KNOBS,
                  global_knobs: Sequence[str] = GLOBAL_KNOBS,
                  generic_global_knobs: Sequence[str] = GENERIC_GLOBAL_KNOBS, prior_generic: float = PRIOR_GENERIC,
                  prior_stack: float = PRIOR_STACK) -> Problem:
    """Lay out the parameters of a fit over ``rows`` (see the module docstring).

    ``base``: profiles the start values come from (over the vendor defaults); ``generic`` /
    ``stacks``: which levels are free.
    """
    rows = list(rows)
    feats = [layout_of(r.workload, r.trainable_fraction) for r in rows]
    groups = batch.group_layouts(feats)
    start = [knobs_with_profiles(r.workload.hardware, list(base)).values() for r in rows]
    fitted = tuple(dict.fromkeys((*generation_knobs, *global_knobs, *(generic_global_knobs if generic else ()))))
    # a knob whose neutral value sits on its bound (async_tp_overlap = 0) starts mid-range, where
    # the logit transform has a gradient; only rows using the feature ever read it
    base_x = {k: np.array([knob_logit(k, FIT_START.get(k, s[k]) if s[k] in KNOB_BOUNDS[k] else s[k]) for s in start])
              for k in fitted}
    fixed = {k: np.array([s[k] for s in start]) for k in KNOB_NAMES if k not in fitted}
    lay = _Layout(rows, fitted)
    _generation_params(lay, generation_knobs, generic, stacks, prior_generic, prior_stack)
    if generic:
        _generic_params(lay, feats, generic_global_knobs, prior_generic)
    _global_params(lay, global_knobs, generic, stacks, prior_generic, prior_stack)
    masks = lay.masks()
    return Problem(rows=rows, groups=groups, base_x=base_x, fixed=fixed, params=lay.params, masks=masks,
                   param_groups=_param_groups(masks, groups, len(rows), len(lay.params)),
                   prior=np.array(lay.prior), weights=_table_weights(rows),
                   measured=np.array([r.measured_step_time_s for r in rows]))


@dataclass
class _Objective:
    """The fit's objective over a problem: log residuals against the measured step times, their
    Huber loss plus the ridge prior, and a forward-difference Jacobian of the residuals."""

    pb: Problem
    eps: float

    def residual(self, pred: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(pred, 1e-12)) - np.log(self.pb.measured)

    def loss(self, res: np.ndarray, th: np.ndarray) -> float:
        a = np.abs(res)
        h = np.where(a <= HUBER_DELTA, 0.5 * a * a, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))
        return float((self.pb.weights * h).sum() + 0.5 * (self.pb.prior * th * th).sum())

    def jacobian(self, theta: np.ndarray, pred: np.ndarray) -> np.ndarray:
        pb = self.pb
        J = np.zeros((len(pb.rows), len(pb.params)))
        logp = np.log(pred)
        for j in range(len(pb.params)):
            th = theta.copy()
            th[j] += self.eps
            p2 = pb.predict(th, pb.param_groups[j])
            m = ~np.isnan(p2)
            J[m, j] = (np.log(p2[m]) - logp[m]) / self.eps
        return J


@dataclass
class _State:
    """Where the Levenberg-Marquardt iteration stands."""

    theta: np.ndarray
    pred: np.ndarray
    res: np.ndarray
    loss: float
    J: np.ndarray
    lam: float = 1e-2


def _lm_step(obj: _Objective, s: _State) -> tuple[bool, bool]:
    """One damped Gauss-Newton step on the Huber-reweighted normal equations, raising the damping
    until the loss falls (at most six tries); an accepted step updates ``s`` and the Jacobian by
    Broyden's rank-one formula. Returns (accepted, improved by more than a relative 1e-5)."""
    pb = obj.pb
    a = np.abs(s.res)
    W = pb.weights * np.where(a <= HUBER_DELTA, 1.0, HUBER_DELTA / np.maximum(a, 1e-12))
    A = s.J.T @ (s.J * W[:, None]) + np.diag(pb.prior)
    b = s.J.T @ (W * s.res) + pb.prior * s.theta
    for _ in range(6):
        step = np.linalg.solve(A + s.lam * np.diag(np.diag(A) + 1e-9), -b)
        th = s.theta + step
        p_new = pb.predict(th)
        r_new = obj.residual(p_new)
        l_new = obj.loss(r_new, th)
        if np.isfinite(l_new) and l_new < s.loss:
            improved = s.loss - l_new > 1e-5 * max(s.loss, 1e-3)
            s.J += np.outer(r_new - s.res - s.J @ step, step) / max(float(step @ step), 1e-18)
            s.theta, s.pred, s.res, s.loss = th, p_new, r_new, l_new
            s.lam = max(s.lam / 3.0, 1e-6)
            return True, improved
        s.lam *= 4.0
    return False, False


def solve(pb: Problem, max_iter: int = 30, eps: float = 1e-3, refresh: int = 4,
          theta0: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Levenberg-Marquardt with Huber IRLS weights; returns (theta, loss).

    The finite-difference Jacobian is recomputed every ``refresh`` accepted steps (and after a
    failed step) and updated by Broyden's rank-one formula in between (Broyden 1965): the
    model is smooth in the knobs, so this saves most of the step-model evaluations."""
    theta = np.zeros(len(pb.params)) if theta0 is None else np.array(theta0, dtype=float)
    if len(pb.params) == 0:
        return theta, 0.0
    obj = _Objective(pb, eps)
    pred = pb.predict(theta)
    res = obj.residual(pred)
    s = _State(theta, pred, res, obj.loss(res, theta), obj.jacobian(theta, pred))
    since = 0  # accepted steps since the Jacobian was last computed afresh
    for _ in range(max_iter):
        accepted, improved = _lm_step(obj, s)
        if not accepted and since == 0:
            break  # a fresh Jacobian and still no descent: converged
        since = since + 1 if accepted else refresh
        if since >= refresh:
            s.J = obj.jacobian(s.theta, s.pred)
            since = 0
            if not accepted:
                continue
        if not improved:
            break
    return s.theta, s.loss


# ------------------------------------------------------------------------------ profiles out
def profiles_from_fit(pb: Problem, theta: np.ndarray) -> dict[str, Profile]:
    """The fitted values as profiles: ``generic`` and one per stack (values, not deviations).

    A value is read off a row the parameter moves (so it is composed exactly as the fit composed
    it, over that row's vendor defaults and base profiles) and written for that row's
    generation; ``generic``'s values come from the same rows with every stack deviation set to
    zero. Generation-independent knobs are also written stack-wide for generations not seen."""
    rows = pb.rows
    gen_arr = np.array([r.generation for r in rows])
    theta_generic = np.array([t if p[0] == "generic" else 0.0 for p, t in zip(pb.params, theta, strict=True)])
    vals_full = pb.knob_values(theta)
    vals_generic = pb.knob_values(theta_generic)

    def theta_of(level: str) -> np.ndarray:
        return theta if level == "stack" else theta_generic

    def profile(stack: str, level: str, vals: Mapping[str, np.ndarray]) -> Profile:
        gen_tbl: dict[str, dict[str, float]] = {}
        knobs: dict[str, float] = {}
        sources: dict[str, str] = {}
        for j, (lvl, key, knob) in enumerate(pb.params):
            if lvl != level or (level == "stack" and key.split("/")[0] != stack):
                continue
            moved = pb.masks[knob][:, j] != 0  # the rows this parameter moves
            for g in sorted(set(gen_arr[moved].tolist())):
                i = int(np.flatnonzero(moved & (gen_arr == g))[0])
                gen_tbl.setdefault(g, {})[knob] = float(vals[knob][i])
                sources[f"{g}.{knob}"] = "fitted"
            if key.endswith("*") and knob not in GENERATION_KNOBS:
                nv = [i for i in np.flatnonzero(moved) if rows[i].workload.hardware.vendor == "nvidia"]
                if nv:
                    knobs[knob] = float(vals[knob][nv[0]])
                    sources[knob] = "fitted"
            elif key.endswith("*") and knob in GENERATION_KNOBS:
                # for silicon the fit has no row of: the all-silicon share (generic) and the stack's
                # shared deviation, without any generation's residual
                start = knob_logit(knob, getattr(vendor_knobs("nvidia"), knob))
                x = start + sum(t for (lv, k2, kn), t in zip(pb.params, theta_of(level), strict=True)
                                if kn == knob and (k2 == "*" or (level == "stack" and k2 == f"{stack}/*")))
                knobs[knob] = float(_from_x(knob, np.array(x)))
                sources[knob] = "fitted"
        return Profile(name=stack, knobs=knobs, generations=gen_tbl, sources=sources)

    out = {DEFAULT_STACK: profile(DEFAULT_STACK, "generic", vals_generic)}
    for s in sorted({p[1].split("/")[0] for p in pb.params if p[0] == "stack"}):
        out[s] = _with_generic_generations(profile(s, "stack", vals_full), out[DEFAULT_STACK], pb, theta)
    return out


COMPOSED = "composed"
"""Source marker of a stack's GEMM share on a generation none of its tables ran on."""


def _with_generic_generations(prof: Profile, generic: Profile, pb: Problem, theta: np.ndarray) -> Profile:
    """``prof`` with a GEMM share for every generation ``generic`` was fitted on and the stack was
    not: generic's share there with the stack's shared deviation, as the fit (and its hold-outs)
    compose a stack on silicon it has no table on. Without it the stack-wide value would apply
    there, the all-silicon centre, and drop what generic learnt of that generation."""
    gen_tbl = {g: dict(v) for g, v in prof.generations.items()}
    sources = dict(prof.sources)
    for knob in GENERATION_KNOBS:
        dev = sum(t for (lv, key, kn), t in zip(pb.params, theta, strict=True)
                  if lv == "stack" and kn == knob and key == f"{prof.name}/*")
        for g, vals in generic.generations.items():
            if knob in vals and knob not in gen_tbl.get(g, {}):
                gen_tbl.setdefault(g, {})[knob] = float(_from_x(knob, np.array(knob_logit(knob, vals[knob]) + dev)))
                sources[f"{g}.{knob}"] = COMPOSED
    return dataclasses.replace(prof, generations=gen_tbl, sources=sources)


# ---------------------------------------------------------------------------------- results
def rows_from_table(runs: Sequence[Any]) -> list[FitRow]:
    """:class:`FitRow` s of the mapped rows of a published-runs table that a fit may use: every
    one but those of a framework no profile describes (:func:`fitted_on`)."""
    return [FitRow(name=r.row_id, table=r.table_id, stack=r.stack, workload=r.workload,
                   measured_step_time_s=float(r.step_time_s)) for r in runs if fitted_on(r)]


def fitted_on(run: Any) -> bool:
    """Whether a mapped row informs the fit. A row of a framework no profile describes is priced by
    ``generic`` and is predicted, never fitted: ``generic`` is the centre every stack's deviation
    is measured from, and one run of unknown software (with the plan its reader had to infer,
    as PaLM's sharding) would move every stack's prediction with it."""
    return bool(run.included) and run.stack != DEFAULT_STACK


# ------------------------------------------------------------------------- a user's profile
USER_KNOBS: tuple[str, ...] = ("attention_fraction", "memory_bound_fraction", "op_overhead_us", "overlap")
"""Stack-wide knobs a user's calibration moves besides the GEMM shares of each generation."""
USER_PRIOR = 2e-2
"""Pull of a user calibration's knobs towards the base profile (per unit logit, squared). Two runs
cannot pin six knobs: the prior spreads the correction over the knobs the runs are sensitive to
(a 125M model's error moves its per-kernel cost, a 70B model's its GEMM share), and the held-out
rows of ``benchmarks/calibrate_two_points.py`` chose its size."""


def fit_user_profile(rows: Sequence[FitRow], name: str, base: Sequence[Profile] = (),
                     knobs: Sequence[str] | None = None,
                     prior: float = USER_PRIOR) -> tuple[Profile, list[Prediction]]:
    """Fit a profile named ``name`` to a user's own runs, over ``base`` profiles (``generic``, and
    the stack it starts from). Knobs fitted: the GEMM share of each generation and dtype the runs
    cover, and the stack-wide :data:`USER_KNOBS`, every one pulled towards its base value by
    ``prior`` (a ridge: with few runs, the knobs they say least about stay where the base put
    them). Every run weighs the same. Values the fit does not move are copied from the base
    profiles, and the kernel facts from the last base profile, so the file stands on its own."""
    if not rows:
        raise SpecError("runs", 0, "at least one measured run to fit")
    rows = [dataclasses.replace(r, stack=name, table=r.name) for r in rows]
    n = len(rows)
    if knobs is None:
        gen_k: tuple[str, ...] = GENERATION_KNOBS
        glob: tuple[str, ...] = USER_KNOBS
    else:
        for k in knobs:
            check_knob_name(k, "knob")
        gen_k = tuple(k for k in knobs if k in GENERATION_KNOBS)
        glob = tuple(k for k in knobs if k not in GENERATION_KNOBS)
    pb = build_problem(rows, base=base, generic=False, generation_knobs=gen_k, global_knobs=glob, prior_stack=prior)
    theta, _ = solve(pb)
    fitted = profiles_from_fit(pb, theta).get(name, Profile(name=name))
    pred = pb.predict(theta)
    preds = [Prediction(r.name, r.table, name, r.measured_step_time_s, float(p))
             for r, p in zip(rows, pred, strict=True)]
    err = summarize(preds)
    text = (f"fitted (trainperf calibrate-model) on {n} run(s): {', '.join(r.name for r in rows)}; "
            f"in-sample MAPE {err['mape_pct']:.1f}%")
    hardware = {r.generation: r.workload.hardware for r in rows}
    gen_tbl: dict[str, dict[str, float]] = {}
    sources: dict[str, str] = {}
    for g, hw in hardware.items():
        vals: dict[str, float] = {}
        for prof, entry in resolved_values(list(base), hw):  # as the fit started from them
            for k, v in prof.values_for(entry).items():
                vals[k] = v
                sources[f"{g}.{k}"] = prof.source_of(k, entry) or prof.name
        for k, v in fitted.generations.get(g, {}).items():
            vals[k] = v
            sources[f"{g}.{k}"] = text
        gen_tbl[g] = vals
    facts: dict[str, Any] = {"kernels": dict(base[-1].kernels)} if base else {}
    prof = Profile(name=name, description=f"Fitted by trainperf calibrate-model over {', '.join(p.name for p in base) or 'vendor defaults'}.",
                   generations=gen_tbl, sources=sources, **facts,
                   fit={"runs": [r.name for r in rows], "in_sample_mape_pct": round(err["mape_pct"], 2),
                        "base": [p.name for p in base]})
    return prof, preds

