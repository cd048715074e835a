"""White-box gradient canaries for DP-SGD-style defenses: the auditor's (scoring and bound) side.

A gradient canary (Nasr et al. 2021/2023; Steinke, Nasr & Jagielski 2023, Sec. 6 "white-box") is a
privacy unit whose clipped gradient is a fixed vector C u_i, u_i a unit direction, at every step it
is sampled. The auditor inserts m such canaries, each independently with probability 1/2, observes
the privatised gradient sums, and scores canary i by the inner product of the observed updates with
its direction, summed over steps:

    score_i = sum_t < g~_t, u_i >,   g~_t = sum_{units u in batch t} clip_C(g_u) + N(0, sigma^2 C^2 I).

Inserted canaries add about q T C to their score. Directions are **Dirac** by default (distinct random
coordinates of the flattened parameter vector: orthogonal, cheap to score for any model size, and each
coordinate carries one canary, so the only interference is the model's own gradient there -- the barrier
Keinan, Shenfeld & Ligett 2025 identify, removed by centring) or **Gaussian** (dense unit vectors).

The audit (:class:`~privaudit.attacks.canaries.gradient_canary_audit.GradientCanaryAudit`, attack ``gradient-canary``;
the running of it is :mod:`privaudit.attacks.canaries.gradient_canary_audit`, the bounds from finished scores
:mod:`privaudit.attacks.canaries.canary_audit`; this module is the maths) runs the target's own DP defense
through the engine's canary hook (:mod:`privaudit.defenses.dp.release.step`): each inserted canary joins every step
independently with the defense's own Poisson rate q, exactly like an example, and contributes Delta e_i
to the sum before the noise, Delta the sensitivity the noise is calibrated to (a canary is a worst-case
example under the claim); the engine hands the privatised sum g~_t (before any normaliser, learning rate
or optimizer state) to the auditor. Each canary is an example the claim covers, sampled as the accountant
assumes, so the one-run bound on these scores is a sound lower bound on the claim's example-level
add/remove epsilon.

Replace-one claims (DPCL: fixed-size batches without replacement) are audited with **paired** Dirac
canaries (:func:`privaudit.attacks.bounds.one_run.paired_one_run_bound`): slot i holds the two candidate gradients
+(Delta/2) e_i and -(Delta/2) e_i (difference Delta, the replace-one sensitivity); a fair coin picks which
one is in the training set, so the dataset size never changes; the slot takes part in each step with the
accountant's marginal rate q = |B|/n. Given every other slot, the two outputs are (1 - q) P_0 + q N(s + a)
and (1 - q) P_0 + q N(s - a) with ||2a|| = Delta: exactly the pair the replace-one without-replacement
accountant bounds, so the bound is sound against the replace-one claim.

Trajectory probes. The trajectory bound (:mod:`privaudit.attacks.bounds.trajectory`) needs per-step trials whose
labels the auditor drew independently of the noise. A canary sampled with rate q gives a "present" trial only when
sampled: m q T / 2 of them over T steps, which leaves its per-step bound loose at small q (at q = 0.004 a few
thousand present trials after 500 steps). With ``probes=True`` each canary's coordinate also receives, at every step,
a probe s Delta / 2 (s = +-1 by a fresh coin of the auditor's own generator, :meth:`GradientCanaries.step_probes`),
added with the canaries before the noise and withdrawn from the release after the observer
(:mod:`privaudit.defenses.dp.release.step`, ``probes``): every coordinate and step is then one trial, labelled by s, the
canary's own designed contribution subtracted (the auditor drew it), x = y / Delta - designed - s / 2 + [s > 0],
so x ~ N([s > 0], z^2) under the claim: m T balanced trials, the same difference Delta between the hypotheses, and
independent given the labels, as the trajectory bound's theorem needs. The bound measures the per-step Gaussian and
composes it with the claim's own sampling (its event), so it compares like with like whatever the probes' rate. The
one-run scores are those of the canaries alone (the probes subtracted), and since the probes leave the release the
model trains as without them.

Scores. ``score="llr"`` (the attack's default) is the idealised step's log-likelihood ratio summed over
the centred steps, sum_t log(1 - q + q exp(mu y_t - mu^2 / 2)) with y_t = <g~_t, e_i> / (noise std) and
mu = norm / (noise std) (:func:`step_llr`; paired slots: the + against the - mixture): the Neyman-Pearson
ranking of one canary's inclusion when the auditor sees every step. ``score="sum"`` is the plain inner
product. Any score fixed before the run gives a sound bound.

Bounds. ``bound`` (``eps_lower_bound``) is the larger of Steinke et al.'s (k+ = k- planned) and the f-DP
one-run bound (Mahloujifar, Melis & Chaudhuri 2025; k+ planned, one-sided) against the (eps, delta) curve,
each at beta / 2 (:func:`privaudit.attacks.bounds.fdp.best_one_run_bound`): sound for any (eps, delta)-DP
mechanism. ``mechanism_bound`` (``eps_lb_mechanism``, on by default) is the f-DP one-run bound against the
claim's own mechanism at beta (:mod:`privaudit.attacks.bounds.mechanism`): it refutes the mechanism the claim
accounts, and is the bound the gate compares. Guess counts come from :func:`planned_guesses`, a simulation
of the claim; the canary count is ``canaries_per_param`` of the trainable parameters, between 1000 and
``max_canaries``.

:func:`gradient_canary_scores` is the same scoring for updates recorded any other way (a ``(T, d)``
array of privatised sums, or parameter deltas of plain SGD, which are proportional to them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from privaudit.attacks.bounds.fdp import best_one_run_bound
from privaudit.attacks.bounds.one_run import default_guesses, one_run_bound
from privaudit.attacks.canaries.canary_strata import stratified_coordinates, tensor_index
from privaudit.attacks.result import AttackResult
from privaudit.attacks.bounds.trajectory import TrajectoryCounts, trajectory_bound
from privaudit.core.errors import ConfigError, one_of
from privaudit.defenses.training.seeding import numpy_rng, torch_generator

DIRECTIONS = ("dirac", "gaussian")
_DENSE_LIMIT = 50_000_000  # m * d entries for Gaussian directions


def canary_directions(dim: int, m: int, kind: str = "dirac", seed: int = 0) -> torch.Tensor | np.ndarray:
    """Unit directions: Dirac -> int64 coordinates (m,) (distinct); Gaussian -> float32 (m, dim)."""
    if kind not in DIRECTIONS:
        raise one_of("directions", kind, DIRECTIONS)
    if m < 1 or dim < 1:
        raise ConfigError(f"canaries: need m >= 1 and dim >= 1, got m={m}, dim={dim}")
    if kind == "dirac":
        if m > dim:
            raise ConfigError(f"canaries: {m} Dirac canaries need at least {m} parameters, got {dim}")
        return numpy_rng(seed, "dirac-canaries").choice(dim, size=m, replace=False).astype(np.int64)
    if m * dim > _DENSE_LIMIT:
        raise ConfigError(f"canaries: {m} Gaussian directions of dimension {dim} are too large; use dirac")
    u = torch.randn(m, dim, generator=torch_generator(seed, "gaussian-canaries"))
    return u / u.norm(dim=1, keepdim=True)


def gradient_canary_scores(updates: torch.Tensor | Iterable[torch.Tensor], directions: torch.Tensor | np.ndarray,
                           reduce: str = "sum") -> np.ndarray:
    """Scores sum_t <update_t, u_i> (``reduce="sum"``) or max_t (``"max"``) for each canary direction."""
    if reduce not in ("sum", "max"):
        raise one_of("reduce", reduce, ("sum", "max"))
    per_step = [_project(u, directions) for u in (updates if not isinstance(updates, torch.Tensor)
                                                   or updates.dim() == 2 else [updates])]
    if not per_step:
        raise ConfigError("updates: no update observed")
    stacked = np.stack(per_step)
    return stacked.sum(axis=0) if reduce == "sum" else stacked.max(axis=0)


def _project(update: torch.Tensor, directions: torch.Tensor | np.ndarray) -> np.ndarray:
    update = torch.as_tensor(update).detach().flatten().double().cpu()
    if isinstance(directions, np.ndarray) and directions.dtype.kind == "i":
        return update[torch.as_tensor(directions)].numpy()
    return (torch.as_tensor(directions).double() @ update).numpy()


SCORES = ("sum", "llr")


def step_llr(y: np.ndarray, mu: float, rate: float, paired: bool) -> np.ndarray:
    """Per-step log-likelihood ratio of a canary's projection y (in noise units) under the idealised step.

    Add/remove: the canary is in (y ~ (1 - q) N(0, 1) + q N(mu, 1)) against out (y ~ N(0, 1)):
    log(1 - q + q exp(mu y - mu^2 / 2)). Paired replace-one slots: + candidate (mixture at +mu) against
    - candidate (mixture at -mu), the difference of the two such terms. Summed over steps this is the
    Neyman-Pearson statistic of one canary's inclusion when the auditor sees every (centred) step, the
    most powerful ranking of the canaries for the one-run guesses (the bounds hold for any score).
    """
    log_keep, log_q = (math.log1p(-rate) if rate < 1 else -math.inf), math.log(rate)

    def mixture(a: np.ndarray) -> np.ndarray:
        return np.logaddexp(log_keep, log_q + a)

    if paired:
        return mixture(mu * y - mu * mu / 2) - mixture(-mu * y - mu * mu / 2)
    return mixture(mu * y - mu * mu / 2)


class GradientCanaries:
    """m gradient canaries over a d-dimensional parameter vector, with their insertion bits and scores.

    ``inserted`` defaults to independent fair coins from ``seed``. The engine calls
    :meth:`unit_gradient` for inserted canaries and :meth:`observe` once per step (see the module
    docstring); :meth:`result` turns the accumulated scores into an :class:`AttackResult` with the
    one-run bound.
    """

    def __init__(self, dim: int, m: int, *, clip_norm: float, kind: str = "dirac", seed: int = 0,
                 inserted: np.ndarray | None = None, paired: bool = False, score: str = "sum",
                 rate: float | None = None, noise_std: float | None = None,
                 tensors: Sequence[tuple[str, int]] | None = None, probes: bool = False):
        if clip_norm <= 0:
            raise ConfigError(f"clip_norm: must be > 0, got {clip_norm!r}")
        if score not in SCORES:
            raise one_of("score", score, SCORES)
        if score == "llr" and (rate is None or noise_std is None or not 0 < rate <= 1 or noise_std <= 0):
            raise ConfigError(f"score 'llr': needs a sampling rate in (0, 1] and a noise std > 0, got "
                              f"rate={rate!r}, noise_std={noise_std!r}")
        self.score, self.rate, self.noise_std = score, rate, noise_std
        self.dim, self.m, self.clip_norm, self.kind, self.seed = dim, m, float(clip_norm), kind, seed
        self.directions = canary_directions(dim, m, kind, seed)
        self.tensor_names, self.tensor_of = self._place_by_tensor(tensors)
        self.inserted = (numpy_rng(seed, "canary-insertion").random(m) < 0.5) if inserted is None \
            else np.asarray(inserted, dtype=bool)
        if self.inserted.shape != (m,):
            raise ConfigError(f"inserted: expected shape ({m},), got {self.inserted.shape}")
        self.paired = paired  # replace-one slots: inserted = the + candidate (else the - one) is trained on
        self.scores = np.zeros(m)
        self.steps = 0
        self.trajectory: TrajectoryCounts | None = None
        self.probes = bool(probes)  # trajectory probes at every step (module docstring)
        self._probe_gen = torch_generator(seed, "trajectory-probes") if probes else None

    @property
    def spread(self) -> float:
        """Delta: the difference between the hypotheses' means on a canary coordinate (add/remove: the canary's
        norm; paired slots: twice it), the unit of the trajectory trials."""
        return 2 * self.clip_norm if self.paired else self.clip_norm

    def step_probes(self) -> torch.Tensor | None:
        """This step's probe signs s (+-1, float64, one per canary, a fresh fair coin of the probes' own generator;
        None without probes); the hook adds s * :attr:`spread` / 2 and :meth:`observe` takes s."""
        if self._probe_gen is None:
            return None
        return torch.randint(0, 2, (self.m,), generator=self._probe_gen).double() * 2 - 1

    def _place_by_tensor(self, tensors: Sequence[tuple[str, int]] | None) -> tuple[tuple[str, ...], np.ndarray | None]:
        """With ``tensors`` ((name, size) of each parameter tensor in the flat layout's order; Dirac only): place
        the canaries so every tensor holds some
        (:func:`~privaudit.attacks.canaries.canary_strata.stratified_coordinates`) and return the names and each
        canary's tensor, for the per-tensor noise counts."""
        if tensors is None or self.kind != "dirac":
            return (), None
        names, numels = tuple(n for n, _ in tensors), [int(k) for _, k in tensors]
        if sum(numels) != self.dim:
            raise ConfigError(f"canaries: the tensors' sizes sum to {sum(numels)}, not the dimension {self.dim}")
        self.directions = stratified_coordinates(self.directions, numels, numpy_rng(self.seed, "canary-strata"))
        return names, tensor_index(self.directions, numels)

    def track_trajectory(self, threshold: float, form: str = "two-sided") -> TrajectoryCounts:
        """Count every step's trials at ``threshold`` for the bound's ``form`` (:mod:`privaudit.attacks.
        trajectory_bound`); :meth:`observe` then needs each step's ``sampled`` mask. Call before the first step."""
        if self.steps:
            raise ConfigError("gradient canaries: the trajectory must be tracked from the first step")
        self.trajectory = TrajectoryCounts(float(threshold), form, tensor_names=self.tensor_names)
        return self.trajectory

    def unit_gradient(self, i: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Canary i's per-unit gradient C u_i (flat, length d)."""
        if isinstance(self.directions, np.ndarray):
            g = torch.zeros(self.dim, dtype=dtype)
            g[int(self.directions[i])] = self.clip_norm
            return g
        return (self.clip_norm * self.directions[i]).to(dtype)

    def inserted_indices(self) -> np.ndarray:
        return np.flatnonzero(self.inserted)

    def observe(self, step: int, noisy_sum: torch.Tensor, sampled: np.ndarray | torch.Tensor | None = None,
                probes: np.ndarray | torch.Tensor | None = None) -> None:
        """Accumulate <g~_t, u_i> for every canary (O(m) memory whatever the number of steps); with a tracked
        trajectory, also count the step's trials (``sampled``: which canaries took part in this step). ``probes``: the
        step's probe signs (:meth:`step_probes`), required with probes; their contribution leaves the scores."""
        if torch.as_tensor(noisy_sum).numel() != self.dim:
            raise ConfigError(f"noisy_sum: expected {self.dim} entries, got {torch.as_tensor(noisy_sum).numel()}")
        if self.probes != (probes is not None):
            raise ConfigError("gradient canaries: a step's probe signs are needed exactly when the canaries probe")
        proj = _project(noisy_sum, self.directions)
        if probes is not None:
            proj = proj - np.asarray(torch.as_tensor(probes).double().cpu()).ravel() * (self.spread / 2)
        if self.trajectory is not None:
            self._count_trials(proj, sampled, probes)
        if self.score == "llr":
            proj = step_llr(proj / self.noise_std, self.clip_norm / self.noise_std, self.rate, self.paired)
        self.scores += proj
        self.steps += 1

    def _count_trials(self, proj: np.ndarray, sampled: np.ndarray | torch.Tensor | None,
                      probes: np.ndarray | torch.Tensor | None = None) -> None:
        """The step's trials in units of the hypotheses' mean difference D = :attr:`spread` (trajectory_bound's
        module docstring; ``proj`` has the probes already subtracted). With probes: every coordinate,
        x = residual + [s > 0], present where s > 0 (module docstring). Without: add/remove x = y / C, present where
        inserted and sampled; paired x = y / (2 C) + 1/2 on the sampled slots, present for the + candidate. Every
        coordinate's y / D less the canaries' designed contribution is also a released-noise residual
        (:mod:`privaudit.attacks.noise.released_noise`)."""
        if sampled is None:
            raise ConfigError("gradient canaries: a tracked trajectory needs each step's sampled canaries")
        took_part = np.asarray(sampled, dtype=bool).ravel()
        y = proj / self.spread
        if self.paired:
            designed = np.where(took_part, np.where(self.inserted, 0.5, -0.5), 0.0)
            x, present = y[took_part] + 0.5, self.inserted[took_part]
        else:
            designed = (self.inserted & took_part).astype(np.float64)
            x, present = y, self.inserted & took_part
        if probes is not None:
            present = np.asarray(torch.as_tensor(probes).cpu()).ravel() > 0
            x = y - designed + present
        self.trajectory.add(x[~present], x[present])
        self.trajectory.add_noise(y - designed, self.tensor_of)

    def result(self, *, beta: float = 0.05, delta: float = 0.0, k_pos: int | None = None,
               k_neg: int | None = None, k_fraction: float = 0.1, k_fdp_fraction: float | None = None,
               unit: str = "example", k_mechanism: int | None = None, event=None,
               trajectory_claim: tuple | None = None) -> AttackResult:
        """Scores and bound. ``k_fdp_fraction`` None: Steinke only (method ``one-run``); else the best of
        Steinke and f-DP at beta / 2 each (``one-run-best``). Paired canaries give a replace-one bound.
        ``event`` (the claim's DpEvent) with ``k_mechanism`` guesses adds ``mechanism_bound``, the one-run
        f-DP bound against the claim's own mechanism (:mod:`privaudit.attacks.bounds.mechanism`), at its own beta.
        ``trajectory_claim`` (the claim's event, its per-step noise multiplier) with a tracked trajectory adds
        ``trajectory_bound`` (:mod:`privaudit.attacks.bounds.trajectory`), at its own beta."""
        if self.steps == 0:
            raise ConfigError("gradient canaries: no step was observed")
        kp, kn = default_guesses(self.m, k_fraction)
        kp, kn = (kp if k_pos is None else k_pos), (kn if k_neg is None else k_neg)
        relation = "replace-one" if self.paired else "add-remove"
        if k_fdp_fraction is None:
            bound = one_run_bound(self.scores, self.inserted, k_pos=kp, k_neg=kn, beta=beta, delta=delta,
                                  relation=relation, unit=unit)
        else:
            k_fdp = max(1, int(round(k_fdp_fraction * self.m)))
            bound = best_one_run_bound(self.scores, self.inserted, k_pos=kp, k_neg=kn, k_fdp=k_fdp, beta=beta,
                                       delta=delta, relation=relation, unit=unit)
        mechanism = None
        if event is not None:
            from privaudit.attacks.bounds.mechanism import mechanism_one_run_bound

            k_m = k_mechanism if k_mechanism is not None else max(1, int(round(0.02 * self.m)))
            mechanism = mechanism_one_run_bound(self.scores, self.inserted, k_pos=k_m, event=event,
                                                relation=relation, unit=unit, beta=beta, delta=delta)
        trajectory = None
        if self.trajectory is not None and trajectory_claim is not None:
            trajectory = trajectory_bound(self.trajectory, event=trajectory_claim[0],
                                          claimed_multiplier=trajectory_claim[1], relation=relation, unit=unit,
                                          beta=beta, delta=delta, steps=self.steps, canaries=self.m,
                                          scores=self.scores, membership=self.inserted)
        return AttackResult(attack="gradient-canary", variant=self.kind + ("-paired" if self.paired else ""),
                            scores=self.scores.copy(), membership=self.inserted.copy(), index=np.arange(self.m),
                            config={"kind": self.kind, "clip_norm": self.clip_norm, "seed": self.seed,
                                    "paired": self.paired, "score": self.score},
                            counts={"n_canaries": self.m, "n_steps": self.steps, "dim": self.dim}, bound=bound,
                            mechanism_bound=mechanism, trajectory_bound=trajectory)


GUESS_FRACTIONS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
#: Guess fractions tried for the mechanism bound (the larger ones never won in the idealised audits).
MECHANISM_FRACTIONS = (0.005, 0.01, 0.02, 0.05)


@dataclass(frozen=True)
class GuessPlan:
    """Guesses fixed before any score: Steinke's k+ = k-, the f-DP bound's k+, the mechanism bound's k+."""

    k_steinke: int
    k_fdp: int
    k_mechanism: int | None = None


def simulate_canary_scores(m: int, *, rate: float, steps: int, norm: float, noise_std: float, paired: bool,
                           score: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(coins, scores) of the idealised canary audit: m Dirac canaries (or paired slots), each sampled with
    ``rate`` at each of ``steps`` steps, adding ``norm`` (paired: +-norm by the coin) to its own coordinate of
    a sum with N(0, noise_std^2) noise and no model gradient, scored as :class:`GradientCanaries` does."""
    coin = rng.random(m) < 0.5
    sign = np.where(coin, 1.0, -1.0) if paired else coin.astype(np.float64)
    hits = rng.random((max(steps, 1), m)) < rate
    mu = norm / noise_std if noise_std > 0 else 1.0  # in noise units (no noise: the signal alone)
    y = mu * sign * hits + (rng.standard_normal(hits.shape) if noise_std > 0 else 0.0)
    scores = step_llr(y, mu, rate, paired).sum(axis=0) if score == "llr" else y.sum(axis=0)
    return coin, scores


def planned_guesses(m: int, *, rate: float, steps: int, norm: float, noise_std: float, paired: bool,
                    beta: float, delta: float, seed: int = 0, replicates: int = 2, score: str = "sum",
                    event=None, relation: str | None = None) -> GuessPlan:
    """The guesses of each bound chosen **from the claim alone**, before any score.

    The rule: simulate the idealised canary audit of the mechanism the claim describes
    (:func:`simulate_canary_scores`, with the audit's own score function) and take, for each bound, the
    guess fraction (:data:`GUESS_FRACTIONS`; :data:`MECHANISM_FRACTIONS` for the mechanism bound's first rung, computed
    only when the claim's ``event`` is given) with the largest mean bound over ``replicates`` simulations
    (Steinke's and the f-DP bound at beta / 2 each, as reported; the mechanism bound at beta). The real
    scores are never read, so k is fixed in advance and the bounds need no correction for the choice.
    """
    from privaudit.attacks.bounds.fdp import fdp_one_run_parameter
    from privaudit.attacks.bounds.one_run import one_run_epsilon
    from privaudit.attacks.bounds.mechanism import LADDER, mechanism_epsilon

    rng = numpy_rng(seed, "planned-guesses")
    ks = sorted({max(1, min(m // 2, int(round(f * m)))) for f in GUESS_FRACTIONS})
    km = sorted({max(1, min(m // 2, int(round(f * m)))) for f in MECHANISM_FRACTIONS})
    st, fd, me = np.zeros(len(ks)), np.zeros(len(ks)), np.zeros(len(km))
    for _ in range(replicates):
        coin, scores = simulate_canary_scores(m, rate=rate, steps=steps, norm=norm, noise_std=noise_std,
                                              paired=paired, score=score, rng=rng)
        order = np.argsort(-scores, kind="stable")
        correct_top = np.cumsum(coin[order])
        correct_bottom = np.cumsum(~coin[order[::-1]])
        for j, k in enumerate(ks):
            st[j] += one_run_epsilon(m, 2 * k, int(correct_top[k - 1] + correct_bottom[k - 1]), beta=beta / 2,
                                     delta=delta)
            fd[j] += fdp_one_run_parameter(m, k, int(correct_top[k - 1]), beta=beta / 2, delta=delta)
        if event is not None:
            for j, k in enumerate(km):
                me[j] += mechanism_epsilon(m, k, int(correct_top[k - 1]), event, relation, beta=beta / LADDER,
                                           delta=delta)[0]
    return GuessPlan(ks[int(np.argmax(st))], ks[int(np.argmax(fd))],
                     km[int(np.argmax(me))] if event is not None else None)


#: Names that moved to the audit modules (:mod:`privaudit.attacks.canaries.canary_audit`,
#: :mod:`privaudit.attacks.canaries.gradient_canary_audit`), still importable from here.
_MOVED = {"CanaryAuditConfig": "canary_audit", "track_claimed_trajectory": "canary_audit",
          "canary_audit_result": "canary_audit", "GradientCanaryConfig": "gradient_canary_audit",
          "SUPPORTED": "gradient_canary_audit", "GradientCanaryAudit": "gradient_canary_audit"}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"privaudit.attacks.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
