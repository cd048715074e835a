"""Final-model audit of a training recipe: worst-case initialisation, a crafted canary, the projection score.

The auditor runs the user's training function ``train(model, x, y, *, seed)`` on a neighbouring pair it chooses,
D (``pair_size`` of the user's members, the first ones: fixed before any run) and D' = D plus one canary, and
sees only each run's **final weights**. A DP guarantee holds for every pair and every initialisation chosen
independently of the runs, so the auditor picks both for power (Annamalai & De Cristofaro 2024, "Nearly tight
black-box auditing of differentially private machine learning", NeurIPS, arXiv 2405.14106):

* **worst-case initialisation** theta_0: the model pretrained (full-batch Adam, :data:`PRETRAIN_STEPS`) on D
  without the canary, then every parameter multiplied by ``scale``. D's examples are then fitted with a
  saturated softmax, so their gradients vanish, and the noise DP-SGD adds moves the weights little relative to
  their size, so the canary's gradient keeps one direction through training;
* **the crafted canary** (:func:`privaudit.audit.user.model.canary_runs.choose_canary`): zero everywhere but the
quietest
  input coordinate (no example of the data touches the weights it feeds), labelled with the class theta_0 finds
  least likely: a mislabelled, out-of-distribution input whose gradient is large (always clipped) and orthogonal
  to the data's;
* **the score**: <theta_T - theta_0, u>, u the unit descent direction of the canary's loss at theta_0. With the
  canary's clipped gradient C u at every step that samples it, theta_T - theta_0 projected on u is
  lr / B (K C + N(0, T sigma^2 C^2)) plus what the data move along u (nothing, at the worst-case init): the
  Gaussian mechanism of the claim observed once per run, the statistic the Neyman-Pearson lemma picks for it
  (Steinke et al. 2025, "The last iterate advantage", for the linear-loss final iterate).

The bound (:func:`final_model_bounds`). A seeded :data:`SELECT_FRACTION` of each side's runs picks the threshold
(:func:`pick_threshold`: a normal fitted to each side, the threshold maximising a Gaussian-curve proxy of the test's
power); the errors are counted on the other runs, which the threshold does not depend on. Those counts give, at 1 -
beta:

* against the claim's own mechanism (when the claim has one: the training function returned Opacus' accountant,
  whose history is the mechanism of the audited runs): :func:`privaudit.attacks.bounds.mechanism.multi_run_rejects`
  and its scale search (sound for runs with that mechanism's profile);
* the Clopper-Pearson (eps, delta) bound (sound for any mechanism): the verdict's fallback without a mechanism;
* beside them, labelled **heuristic, not a bound**: the GDP epsilon of the same Clopper-Pearson rates (Nasr et al.
  2023: assumes the trade-off curve Gaussian) and the point estimate mu_hat = (mean_in - mean_out) / sd_out.

The bound against the number of runs (:func:`runs_curve`): the same bound on the first n runs of each side, for n
doubling up to all of them; each point is a 1 - beta bound on its own (not simultaneously).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from privaudit.core.errors import ConfigError

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

#: Full-batch Adam steps (learning rate :data:`PRETRAIN_LR`) of the worst-case initialisation's pretraining.
PRETRAIN_STEPS, PRETRAIN_LR = 300, 1e-2
#: The share of each side's runs that picks the threshold (the rest are counted).
SELECT_FRACTION = 0.15
DESIGNS = ("crafted", "quiet-coordinate")
#: Runs a side by default: at the README's Opacus recipe about two minutes of CPU, and on the idealised Gaussian
#: mechanism of its pair a bound near 0.75 of the claim (the bound against the number of runs shows what fewer or
#: more buy).
DEFAULT_CANARY_RUNS = 1000


@dataclass(frozen=True)
class FinalModelDesign:
    """``pair_size``: examples of D (the first of the user's members); ``scale``: the factor on the pretrained
    parameters (1: pretrained only); ``pretrain_steps``: 0 keeps the factory's initialisation."""

    pair_size: int = 32
    scale: float = 10.0
    pretrain_steps: int = PRETRAIN_STEPS

    def validate(self, members: int) -> None:
        if not 1 <= self.pair_size <= members:
            raise ConfigError(f"--canary-pair-size: must lie in [1, {members}] (the members given), got "
                              f"{self.pair_size!r}")
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise ConfigError(f"--canary-scale: must be a finite number > 0, got {self.scale!r}")
        if not 0 <= self.pretrain_steps <= 100_000:
            raise ConfigError(f"pretrain_steps: must lie in [0, 100000], got {self.pretrain_steps!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"pair_size": self.pair_size, "scale": self.scale, "pretrain_steps": self.pretrain_steps}


def flat(net: nn.Module) -> torch.Tensor:
    """Every parameter of ``net`` in one detached float64 vector."""
    import torch

    return torch.cat([p.detach().reshape(-1).double() for p in net.parameters()])


def worst_case_init(net: nn.Module, x: torch.Tensor, y: torch.Tensor, design: FinalModelDesign, seed: int) -> None:
    """Pretrain ``net`` in place on (x, y) by full-batch Adam, then multiply every parameter by ``design.scale``."""
    import torch
    import torch.nn.functional as F

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net.train()
        opt = torch.optim.Adam(net.parameters(), lr=PRETRAIN_LR)
        for _ in range(design.pretrain_steps):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(design.scale)
    net.zero_grad(set_to_none=True)
    net.eval()


def canary_direction(net: nn.Module, x: torch.Tensor, y: int) -> torch.Tensor:
    """u: the unit descent direction -grad / |grad| of the canary's cross-entropy at ``net``'s parameters."""
    import torch
    import torch.nn.functional as F

    net.zero_grad(set_to_none=True)
    F.cross_entropy(net(x), torch.tensor([y])).backward()
    grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double()
                      for p in net.parameters()])
    net.zero_grad(set_to_none=True)
    norm = float(grad.norm())
    if not norm > 0:
        raise ConfigError("--canary-design crafted: the canary's gradient is zero at the worst-case initialisation "
                          "(the model does not depend on the canary's input coordinate); use quiet-coordinate")
    return -grad / norm


def run_pair(net0: nn.Module, x: torch.Tensor, y: torch.Tensor, canary_x: torch.Tensor, canary_y: int,
             train: Callable[..., Any], runs: int, seeds: Callable[[int], int],
             progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """(scores with the canary, scores without, what each run returned): ``runs`` a side, alternating, each from a
    copy of ``net0`` with seed ``seeds(i)``; the score is <theta_T - theta_0, u> (module docstring)."""
    import torch

    theta0, u = flat(net0), canary_direction(net0, canary_x, canary_y)
    with_canary = (torch.cat([x, canary_x]), torch.cat([y, torch.tensor([canary_y], dtype=y.dtype)]))
    scores, returned = np.empty(2 * runs), []
    for i in range(2 * runs):
        net = copy.deepcopy(net0).train()  # as the factory builds it
        xs, ys = with_canary if i % 2 == 0 else (x, y)
        returned.append(train(net, xs.clone(), ys.clone(), seed=seeds(i)))
        scores[i] = float((flat(net) - theta0) @ u)
        if progress is not None:
            progress(i)
    return scores[0::2], scores[1::2], returned


def accountant_history(returned: list[Any]) -> tuple[str, list[tuple[float, float, int]]] | None:
    """(Opacus' mechanism name, history) when every run returned an Opacus accountant with the same history (the
    mechanism of the audited pair), else None."""
    found = []
    for r in returned:
        history = getattr(r, "history", None)
        mechanism = getattr(r, "mechanism", None)
        if history is None or not callable(mechanism):
            return None
        found.append((str(mechanism()), [(float(z), float(q), int(s)) for z, q, s in history]))
    if not found or any(f != found[0] for f in found[1:]):
        return None
    return found[0]


def split_runs(n_in: int, n_out: int, seed: int, fraction: float = SELECT_FRACTION
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(selecting in, counted in, selecting out, counted out) run indices: a seeded ``fraction`` of each side."""
    from privaudit.defenses.training.seeding import numpy_rng

    rng = numpy_rng(seed, "final-model-split")
    pin, pout = rng.permutation(n_in), rng.permutation(n_out)
    k_in, k_out = max(2, int(n_in * fraction)), max(2, int(n_out * fraction))
    return pin[:k_in], pin[k_in:], pout[:k_out], pout[k_out:]


def pick_threshold(ins: np.ndarray, outs: np.ndarray, counted_in: int, counted_out: int, beta: float) -> float:
    """The threshold for ``counted_in`` + ``counted_out`` runs still to be scored, from the selecting runs ``ins``,
    ``outs`` alone (higher score = canary in): a normal fitted to each side, and the threshold on a fine grid that
    maximises the Gaussian-curve proxy Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi) of the mechanism test's power at the
    error counts the fit expects (Clopper-Pearson at beta / 2 each). Without a spread on either side: the middle of
    the two sides' means."""
    from scipy import stats

    from privaudit.attacks.bounds.multi_run import cp_upper_vec

    m_in, m_out = float(np.mean(ins)), float(np.mean(outs))
    s_in, s_out = float(np.std(ins, ddof=1)), float(np.std(outs, ddof=1))
    if not (s_in > 0 and s_out > 0 and np.isfinite(s_in + s_out)):
        return (m_in + m_out) / 2
    spread = 5 * max(s_in, s_out)
    t = np.linspace(min(m_in, m_out) - spread, max(m_in, m_out) + spread, 4001)
    fp = np.round(counted_out * stats.norm.sf((t - m_out) / s_out))
    fn = np.round(counted_in * stats.norm.cdf((t - m_in) / s_in))
    mu = (stats.norm.isf(cp_upper_vec(fp, counted_out, beta / 2))
          - stats.norm.ppf(cp_upper_vec(fn, counted_in, beta / 2)))
    return float(t[int(np.argmax(mu))])


def final_model_bounds(ins: np.ndarray, outs: np.ndarray, *, beta: float, delta: float, event: Any = None,
                       relation: str = "add-remove", seed: int = 0) -> dict[str, Any]:
    """The bounds of the module docstring from the runs' scores (higher = canary in): ``cp`` (Clopper-Pearson,
    any mechanism), ``mechanism`` (against ``event``'s own curve, None without one), their ceilings (no error among
    the counted runs), ``heuristic`` (labelled estimates, not bounds) and the threshold's counts."""
    from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound
    from privaudit.attacks.bounds.gdp import gdp_mu_lower
    from privaudit.attacks.bounds.multi_run import hypothesis_test_epsilon

    ins, outs = np.asarray(ins, np.float64).ravel(), np.asarray(outs, np.float64).ravel()
    if min(ins.size, outs.size) < 4:
        raise ConfigError(f"--canary-runs: the final-model bound needs at least 4 runs a side, got {ins.size}")
    sel_in, cnt_in, sel_out, cnt_out = split_runs(ins.size, outs.size, seed)
    t = pick_threshold(ins[sel_in], outs[sel_out], cnt_in.size, cnt_out.size, beta)
    fn, fp = int(np.sum(ins[cnt_in] < t)), int(np.sum(outs[cnt_out] >= t))
    n_in, n_out = int(cnt_in.size), int(cnt_out.size)
    how = (f"threshold {t:.4g} chosen on a separate {SELECT_FRACTION:.0%} of each side's runs "
           f"({sel_in.size}+{sel_out.size})")
    eps, fpr_hi, fnr_hi = hypothesis_test_epsilon(fp, n_out, fn, n_in, alpha=beta, delta=delta)
    counts = {"runs_in": n_in, "runs_out": n_out, "false_negatives": fn, "false_positives": fp, "threshold": t,
              "fpr_upper": fpr_hi, "fnr_upper": fnr_hi, "select_in": int(sel_in.size), "select_out": int(sel_out.size)}
    cp = EpsilonLowerBound(eps, "clopper-pearson", f"clopper-pearson (multi-run, final weights): {fp} FP / {n_out} "
                           f"and {fn} FN / {n_in} runs, {how}, {100 * (1 - beta):.0f}% confidence, delta={delta:g}",
                           1 - beta, delta, counts, relation=relation)
    out: dict[str, Any] = {"cp": cp, "cp_ceiling": hypothesis_test_epsilon(0, n_out, 0, n_in, alpha=beta,
                                                                           delta=delta)[0],
                           "mechanism": None, "mechanism_ceiling": None, "counts": counts}
    if event is not None:
        from privaudit.attacks.bounds import mechanism as mb

        out["mechanism"] = mb.multi_run_mechanism_bound_counts(fp, n_out, fn, n_in, event=event, relation=relation,
                                                               beta=beta, delta=delta, threshold=t, how=how)
        out["mechanism_ceiling"] = mb.scale_search(
            lambda s: mb.multi_run_rejects(0, n_out, 0, n_in, event, relation, s, beta=beta), event, relation,
            delta)[0]
    mu_lb = max(gdp_mu_lower(fpr_hi, fnr_hi), gdp_mu_lower(fnr_hi, fpr_hi))
    mu_hat = float((ins.mean() - outs.mean()) / max(outs.std(ddof=1), 1e-300))
    out["heuristic"] = {
        "gdp_mu": mu_lb, "gdp_epsilon": _gdp(mu_lb, delta), "mu_hat": mu_hat, "mu_hat_epsilon": _gdp(mu_hat, delta),
        "label": "heuristic, not a bound: the GDP epsilon of the Clopper-Pearson rates (assumes a Gaussian "
                 "trade-off curve, Nasr et al. 2023) and of the point estimate mu_hat = (mean_in - mean_out) / "
                 "sd_out (no confidence)"}
    return out


def _gdp(mu: float, delta: float) -> float | None:
    """mu-GDP's epsilon at ``delta`` (None at delta 0; infinity beyond mu = 40, where it exceeds any claim)."""
    from privaudit.attacks.bounds.gdp import gdp_epsilon

    if not delta > 0:
        return None
    return math.inf if not mu <= 40 else gdp_epsilon(max(mu, 0.0), delta)


def runs_curve(ins: np.ndarray, outs: np.ndarray, *, beta: float, delta: float, event: Any = None,
               relation: str = "add-remove", seed: int = 0, smallest: int = 8) -> list[dict[str, Any]]:
    """The bound on the first n runs of each side, n = smallest, 2 smallest, ... and all of them: what more runs
    buy. Each point is a 1 - beta bound on its own."""
    total = min(len(ins), len(outs))
    sizes = sorted({*(n for n in (smallest * 2 ** j for j in range(32)) if n < total), total})
    points = []
    for n in sizes:
        if n < 4:
            continue
        b = final_model_bounds(ins[:n], outs[:n], beta=beta, delta=delta, event=event, relation=relation, seed=seed)
        points.append({"runs_per_side": n, "eps_lb": b["cp"].epsilon,
                       "eps_lb_mechanism": None if b["mechanism"] is None else b["mechanism"].epsilon,
                       "ceiling": b["cp_ceiling"], "mechanism_ceiling": b["mechanism_ceiling"],
                       "heuristic_gdp_epsilon": b["heuristic"]["gdp_epsilon"]})
    return points
