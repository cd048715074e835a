"""Step-level audit of a defense's own privatised step (the maths: :mod:`privaudit.attacks.step.step_distinguisher`).

For a defense, :func:`audit_defense` calibrates its noise as training does (``Defense.calibrate`` at
the target epsilon and the claim's delta), reads the per-step privacy its accountant assumes
(mu_claim = 1 / z_claimed: the claimed sensitivity over the claimed noise std; a positive control
claims more noise than it adds), builds neighbouring pairs of batches at the claim's relation and
evaluates the defense's pre-noise step (:meth:`DPDefense.quantity_function`: the code it trains
with) once per side with all non-noise randomness shared. Pairs (``--pair``):

* ``canary`` -- a real batch with and without (add/remove) or with one unit swapped for
  (replace-one) a worst-case unit whose clipped contribution is Delta e_k: a Dirac gradient canary
  of exactly the claimed sensitivity, orthogonal to every other coordinate (Nasr et al. 2023's
  Dirac canary, the white-box hook of :mod:`privaudit.defenses.dp.release.step`). It attains the claim, so it measures
  whether the noise really added matches what the accountant assumes.
* ``extreme`` -- the canonical input pair: the batch with and without a Dirac-like image (one
  pixel at the maximum, the rest 0), or with its first example swapped for one.
* ``witness`` -- the sensitivity search's best pair for the defense's gradient claim (the register
  entry's setting with the largest batch; a violated claim's witness), evaluated at the witness's model state.

Mechanisms released before the gradient (DPCL's noised similarity matrix, noised means and SSEs)
are handled by conditioning on their released value: the accountant composes them adaptively, so
for *every* released value s the gradient mechanism must be Gaussian with the claimed sensitivity.
Side D' draws the pre-gradient noise e' = e + (q(D) - q(D')) / sigma_q so that both sides release
the same s = q(D) + sigma_q e (:class:`PinnedRandomness`); only the gradient then differs, and a
distinguishability above 1 / z_g at that s refutes the gradient mechanism's claim.

ALM has no training step: its privatised "step" is the one release of the noised head, audited at delta 0
(pure DP) by :mod:`privaudit.audit.step.release`, which :func:`audit_defense` hands ``alm`` to.

Each pair's verdict: ``refuted`` when mu_lb > mu_claim or eps_lb > eps_claim (each bound at
alpha / (2 pairs), so the defense's family-wise error is alpha), else ``not refuted``; the power
mu_lb / mu_claim is reported. A refuting pair's witness (both batches, both noiseless outputs,
the pins, the model) is saved as safetensors beside a JSON header.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from privaudit.attacks.bounds.gdp import gdp_epsilon
from privaudit.attacks.step.step_distinguisher import NOISE_MODES, gaussian_step_scores, step_mu
from privaudit.audit.step.pairs import (StepAudit, StepRequest, audit_verdict, dirac_image, refutes, search_witness,
                                        witness_info, write_witness)
from privaudit.core.errors import ConfigError, check_positive, check_probability, one_of
from privaudit.defenses.dp import bounds as dp_bounds
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.audit.step.render import summary_line

PAIRS = ("canary", "extreme", "witness")
PAIR_CHOICES = ("all", "canonical") + PAIRS
DEFAULT_DRAWS = 100_000
DEFAULT_WITNESS_EVALUATIONS = 100

# the defense's gradient claim in the sensitivity register (the witness pair's source)
GRADIENT_CLAIMS = {"dpsgd": "dpgcl.sample-level", "dp-clip": "dpgcl.batch-level", "dp-gcl": "dpgcl.group[random]",
                   "control-undernoised": "dpgcl.group[random]", "logit-dp": "logitdp.infonce",
                   "dpcl-simclr": "dpcl.simclr-gradient", "dpcl-barlow": "dpcl.barlow-gradient"}
#: Federated defenses: their privatised step is the round's aggregation (clipped client deltas, summed, noised).
FEDERATED = ("dp-fedemb", "dp-fedavg")
#: One-shot additive releases (ALM's noised head): audited by :mod:`privaudit.audit.step.release`.
RELEASES = ("alm",)
DEFENSES = tuple(GRADIENT_CLAIMS) + FEDERATED + RELEASES
FEDERATED_DIM = 256  # coordinates of the synthetic client deltas (the aggregation does not depend on their origin)

# mechanisms released before the gradient: name -> (quantity key, sensitivity as compute() uses it at batch b)
PINNED: dict[str, dict[str, tuple[str, Callable[[int], float]]]] = {
    "dpcl-simclr": {"similarity": ("similarity", lambda b: dp_bounds.dpcl_similarity(2 * b))},
    "dpcl-barlow": {"mean[view1]": ("mean", dp_bounds.dpcl_mean), "mean[view2]": ("mean[view2]", dp_bounds.dpcl_mean),
                    "sse[view1]": ("sse", lambda b: dp_bounds.dpcl_sse()),
                    "sse[view2]": ("sse[view2]", lambda b: dp_bounds.dpcl_sse())},
}


class PinnedRandomness(StepRandomness):
    """A step's randomness with some mechanisms' standard-normal noise replaced by given values."""

    def __init__(self, seed: int, pins: Mapping[str, torch.Tensor], step: int = 0):
        super().__init__(seed, step)
        self.pins = dict(pins)

    def normal(self, shape, purpose, *, device="cpu", dtype=torch.float32):  # type: ignore[override]
        if purpose in self.pins:
            return self.pins[purpose].reshape(tuple(shape)).to(device=device, dtype=dtype)
        return super().normal(shape, purpose, device=device, dtype=dtype)


def pair_choices(pair: str) -> tuple[str, ...]:
    if pair not in PAIR_CHOICES:
        raise one_of("pair", pair, PAIR_CHOICES)
    return {"all": PAIRS, "canonical": ("canary", "extreme")}.get(pair, (pair,))


class _Step:
    """One defense instance with its model and noise: evaluates the pre-noise step on a batch."""

    def __init__(self, defense: Any, data: Any, model: torch.nn.Module, z_actual: float, seed: int,
                 engine: str | None = None):
        from privaudit.defenses.dp.accounting import noise_multipliers

        self.defense, self.data, self.model = defense, data, model
        self.plan = defense.plan(len(data.train))
        self.mechanisms = defense.mechanisms(self.plan)
        self.multipliers = noise_multipliers(self.mechanisms, z_actual)
        self.sensitivity = float(self.mechanisms[0].sensitivity)
        self.sigma = float(z_actual) * self.sensitivity
        self.factory = defense.quantity_function(data, model, noise_multiplier=z_actual, seed=seed,
                                                 **({"engine": engine} if engine else {}))
        self.pinned = PINNED.get(defense.name, {}) if self._noised() else {}

    def _noised(self) -> bool:
        flag = getattr(self.defense, "noised", "")
        return bool(flag) and bool(getattr(self.defense.config, flag, False))

    def outputs(self, xa: torch.Tensor, xb: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Noiseless gradients on D and D' with shared randomness, D' pinned to D's earlier releases."""
        rnd = StepRandomness(seed)
        pins: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, (key, sens) in self.pinned.items():
                qa, qb = self.factory(key)(xa, rnd).double(), self.factory(key)(xb, rnd).double()
                std = self.multipliers[name] * sens(xa.shape[0])
                e = rnd.normal(qa.shape, name).double()
                pins[name] = (e + (qa - qb) / std).float()
            ga = self.factory("gradient")(xa, rnd)
            gb = self.factory("gradient")(xb, PinnedRandomness(seed, pins) if pins else rnd)
        return ga.detach().cpu(), gb.detach().cpu(), pins


def calibrated(defense: Any, data: Any, target_epsilon: float | None, delta: float,
               noise_multiplier: float | None = None) -> dict[str, float]:
    """The multiplier training adds (z_actual) and the one the claim states (z_claimed), with z_eff."""
    from privaudit.defenses.base import Budget

    plan = defense.plan(len(data.train))
    mechs = defense.mechanisms(plan)
    budget = Budget(target_epsilon=target_epsilon, delta=delta, noise_multiplier=noise_multiplier)
    z = float(defense.calibrate(plan, mechs, budget, delta))
    claim = defense.claim_for(plan, mechs, z, delta)
    zs = claim.params["noise_multipliers"]
    return {"z_actual": z, "z_claimed": float(zs[mechs[0].name]),
            "z_effective": float(claim.params["effective_noise_multiplier"]), "epsilon_run": target_epsilon}


def _batch(data: Any, size: int, seed: int) -> torch.Tensor:
    from privaudit.defenses.training.seeding import torch_generator

    n = len(data.train)
    idx = torch.randperm(n, generator=torch_generator(seed, "step-audit-batch"))[:min(size, n)]
    return data.train.x[idx]


def _witness_pair(defense_name: str, ctx: Any, evaluations: int, seed: int):
    """(defense, model state, D, D', randomness, search summary) from the register's search."""
    from privaudit.audit.sensitivity.register import CLAIMS, NOISE_MULTIPLIER
    from privaudit.defenses.registry import make_defense

    spec = CLAIMS[GRADIENT_CLAIMS[defense_name]]
    setting, target, res = search_witness(spec, ctx, evaluations, seed)
    a, b = res.best.pair.neighbours(target.relation, target.domain.unit_size)
    overrides = {**spec.base_overrides, **setting.overrides}
    if defense_name != spec.defense:
        overrides = dict(setting.overrides)
    overrides.pop(NOISE_MULTIPLIER, None)  # a search setting, not a hyper-parameter: the audit calibrates its own
    state = target.model_state
    if state is not None and res.best.pair.params is not None:
        state = {**state, **res.best.pair.params}  # the parameter value the search found the pair at
    d = make_defense(defense_name, overrides)
    return d, state, a["x"], b["x"], int(res.best.pair.randomness), witness_info(spec, setting, target, res)


def _save_witness(out_dir: Path, defense: str, pair: str, step: _Step, xa, xb, ga, gb, pins, seed: int,
                  meta: dict[str, Any]) -> str:
    tensors = {"a.x": xa.detach().cpu().clone(), "b.x": xb.detach().cpu().clone(),
               "out.a": ga.clone(), "out.b": gb.clone()}
    tensors.update({f"pin.{k}": v.clone() for k, v in pins.items()})
    # clones: tensors may share storage (the canary pair's batches; tied weights), which safetensors refuses
    tensors.update({f"model.{k}": v.detach().cpu().clone().contiguous() for k, v in step.model.state_dict().items()})
    header = {"defense": defense, "pair": pair, "randomness": seed, "config": step.defense.config_dict(), **meta}
    return write_witness(out_dir, f"{defense}.{pair}.seed{seed}", tensors, header)


def _gaussian_claim(z: float, z_added: float, z_effective: float, request: StepRequest, what: str) -> dict[str, Any]:
    """A per-step Gaussian claim at multiplier ``z``: mu = 1 / z, and its epsilon at the request's delta."""
    mu = 1.0 / z
    return {"noise_multiplier": z, "noise_multiplier_added": z_added, "effective_noise_multiplier": z_effective,
            "mu": mu, "epsilon": gdp_epsilon(mu, request.delta), "delta": request.delta,
            "target_epsilon": request.target_epsilon, "what": what}


def _gaussian_pair(kind: str, index: int, diff: torch.Tensor, sensitivity: float, std: float, request: StepRequest,
                   claim: Mapping[str, Any], conditioned_on: list[str], batch: list[int]) -> dict[str, Any]:
    """One pair's row: the noiseless difference ``diff`` of a Gaussian step with noise std ``std`` drawn many
    times per side, scored by the optimal test, and its sound bounds against the claim's mu and epsilon."""
    s0, s1 = gaussian_step_scores([diff], [std], int(request.draws), request.generator(index), noise=request.noise)
    b = request.bounds(s0, s1, index, request.delta)
    mu_claim, eps_claim = claim["mu"], claim["epsilon"]
    norm = float(torch.linalg.vector_norm(diff))
    refuted = refutes(b.mu_lower, b.epsilon_lower, mu_claim, eps_claim)
    return {"pair": kind, "difference_norm": norm, "sensitivity_claimed": sensitivity, "noise_std": std,
            "difference_over_sensitivity": norm / sensitivity, "mu_pair": step_mu([diff], [std]),
            "mu_lower": b.mu_lower, "epsilon_lower": b.epsilon_lower, "epsilon_from_mu": b.epsilon_from_mu,
            "power_mu": b.mu_lower / mu_claim, "power_epsilon": b.epsilon_lower / eps_claim if eps_claim > 0 else None,
            "verdict": "refuted" if refuted else "not refuted", "bounds": b.to_dict(),
            "conditioned_on": conditioned_on, "batch": batch}


def _gaussian_result(name: str, relation: str, unit: str, claim: dict[str, Any], settings: dict[str, Any],
                     pairs: list[dict[str, Any]]) -> StepAudit:
    """The defense's verdict from its pairs' (:func:`audit_verdict`), with the largest bounds and the power
    mu_lb / mu_claim of the pair with the largest mu_lb."""
    done = [r for r in pairs if r["verdict"] != "error"]
    verdict = audit_verdict(pairs)
    if not done:
        return StepAudit(name, relation, unit, claim, settings, tuple(pairs), verdict)
    best = max(done, key=lambda r: r["mu_lower"])
    return StepAudit(name, relation, unit, claim, settings, tuple(pairs), verdict, best["pair"], best["mu_lower"],
                     max(r["epsilon_lower"] for r in done), best["mu_lower"] / claim["mu"])


def _aggregate_sums(deltas: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """The noiseless output of DP-FedEmb's own aggregation (:func:`privaudit.defenses.fedemb.aggregate.noised_mean` with
    no noise): the sum of the clients' clipped deltas, as its observer sees it."""
    from privaudit.defenses.fedemb.aggregate import noised_mean

    seen: dict[str, torch.Tensor] = {}
    noised_mean({"w": deltas}, clip_norm, 0.0, torch.Generator(),
                observer=lambda noisy, data: seen.update(sum=data["w"].double().clone()))
    return seen["sum"]


def _federated_step(name: str, defense: Any, data: Any, request: StepRequest) -> StepAudit:
    """The step audit of a federated defense: one round's aggregation on replace-one neighbouring rounds.

    The released quantity is the sum over the round's virtual clients of their deltas clipped to gamma, plus
    N(0, (sigma gamma)^2 I) (DP-FedEmb Algorithm 1 l. 12-15, App. C); replacing one user moves one client's
    clipped delta, by at most 2 gamma, so the claim's per-round mechanism is Gaussian with mu = 2 / sigma =
    1 / z (z the event multiplier). The noiseless sums come from the defense's own aggregation code on
    synthetic client deltas (clipping bounds the step whatever local training produced). Pairs: ``canary``
    (the replaced client's clipped delta +gamma e_0 against -gamma e_0: exactly the claimed sensitivity) and
    ``extreme`` (a client's delta, far outside the clip ball, against its negation). The sensitivity
    register's witness (virtual clients grouping several users) is a data-level claim, not this step's.
    """
    from privaudit.defenses.base import Budget
    from privaudit.defenses.training.seeding import torch_generator

    if "witness" in request.kinds:
        raise ConfigError(f"pair: the step audit of {name!r} (its aggregation) supports the pairs canary, extreme "
                          "and canonical; the witness pair is the sensitivity register's, not this step's")
    cfg = defense.config
    if cfg.adaptive_clipping:
        raise ConfigError(f"defense {name!r}: the step audit covers the fixed-clip aggregation; set "
                          "adaptive_clipping = false")
    num_users = len(defense.users(data, request.seed))
    plan = defense.noise_plan(Budget(target_epsilon=request.target_epsilon, delta=request.delta,
                                     noise_multiplier=request.noise_multiplier), num_users)
    if plan.event_z <= 0:
        raise ConfigError(f"defense {name!r}: no noise to audit (non-private budget)")
    gamma = float(cfg.clip_norm)
    claim = _gaussian_claim(plan.event_z, plan.sigma, plan.event_z, request,
                            "one round's aggregation (before user sampling): Gaussian sum of clipped client deltas, "
                            "replace-one sensitivity 2 gamma, mu = 1 / z")
    base = torch.randn(int(cfg.clients_per_round), FEDERATED_DIM,
                       generator=torch_generator(request.seed, "step-audit-fed"))
    base = base * (4.0 * gamma / base.norm(dim=1, keepdim=True))  # every client far outside the clip ball
    pairs = []
    for i, kind in enumerate(request.kinds):
        start = time.perf_counter()
        a, b = base.clone(), base.clone()
        if kind == "canary":
            a[0] = 0.0
            b[0] = 0.0
            a[0, 0], b[0, 0] = gamma, -gamma
        else:
            b[0] = -a[0]
        diff = _aggregate_sums(b, gamma) - _aggregate_sums(a, gamma)
        row = _gaussian_pair(kind, i, diff, 2.0 * gamma, plan.sigma * gamma, request, claim, [],
                             [int(a.shape[0]), int(b.shape[0])])
        pairs.append({**row, "seconds": round(time.perf_counter() - start, 3)})
    settings = request.settings(clients=int(cfg.clients_per_round), delta_dim=FEDERATED_DIM)
    return _gaussian_result(name, "replace-one", "user", claim, settings, pairs)


class _GradientAudit:
    """The audit of one defense's DP-SGD-style step: its noise calibrated as training does, its model (built
    once, for the canary and extreme pairs) and one row per pair."""

    def __init__(self, name: str, ctx: Any, request: StepRequest, *, z: Mapping[str, float] | None = None,
                 model: torch.nn.Module | None = None, engine: str | None = None):
        """``z`` (z_actual, z_claimed, z_effective): the multipliers of a run that happened (default: calibrated as
        training does); ``model``: the model the canonical pairs run at (default: the seeded initial model);
        ``engine``: the per-unit engine of the canonical pairs' evaluations (default: vmap, which the witness search's
        differentiable evaluations need to agree with bit for bit)."""
        from privaudit.attacks.membership.shadow_models import resolve_defense

        self.name, self.ctx, self.request, self.data = name, ctx, request, ctx.data
        self.defense = resolve_defense(name, dict(request.params))
        if not getattr(self.defense, "private", False) or not hasattr(self.defense, "quantity_function"):
            raise ConfigError(f"defense: {name!r} has no DP-SGD-style privatised step to audit")
        self.z = dict(z) if z is not None else calibrated(self.defense, self.data, request.target_epsilon,
                                                          request.delta, request.noise_multiplier)
        self.relation = self.defense.plan(len(self.data.train)).relation
        self.claim = _gaussian_claim(
            self.z["z_claimed"], self.z["z_actual"], self.z["z_effective"], request,
            "the gradient mechanism of one step (batch level, before subsampling): Gaussian with the claimed "
            "sensitivity, mu = 1 / z")
        self._base: _Step | None = None
        self._model, self._engine = model, engine

    def run(self) -> StepAudit:
        pairs = [self.pair(i, kind) for i, kind in enumerate(self.request.kinds)]
        return _gaussian_result(self.name, self.relation, "example", self.claim, self.request.settings(), pairs)

    def base_step(self) -> _Step:
        if self._base is None:
            d, seed = self.defense, self.request.seed
            model = self._model if self._model is not None else d.build(d.model_spec(self.data.info), seed)
            self._base = _Step(d, self.data, model.eval(), self.z["z_actual"], seed, self._engine)
        return self._base

    def inputs(self, kind: str) -> tuple[_Step, torch.Tensor, torch.Tensor, int, dict[str, Any]]:
        """(step, D, D', randomness seed, the witness search's summary) of a pair."""
        seed = self.request.seed
        if kind == "witness":
            d, state, xa, xb, rseed, info = _witness_pair(self.name, self.ctx, self.request.witness_evaluations, seed)
            model = d.build(d.model_spec(self.data.info), seed)
            if state is not None:
                model.load_state_dict(dict(state))
            return _Step(d, self.data, model.eval(), self.z["z_actual"], seed), xa, xb, rseed, info
        step = self.base_step()
        xa = _batch(self.data, step.plan.batch_size, seed)
        if kind == "extreme":
            dirac = dirac_image(xa[:1])
            return step, xa, torch.cat([xa, dirac]) if self.relation == "add-remove" else torch.cat([dirac, xa[1:]]), \
                seed, {}
        return step, xa, xa, seed, {}

    def pair(self, index: int, kind: str) -> dict[str, Any]:
        """One pair's row (an ``error`` row when it fails for any reason but bad input)."""
        start = time.perf_counter()
        try:
            step, xa, xb, rseed, info = self.inputs(kind)
            ga, gb, pins = step.outputs(xa, xb, rseed)
            if kind == "canary":  # the worst-case unit the claim allows: + Delta e_0 on D'
                gb = gb.clone()
                gb[0] += step.sensitivity
            diff = gb.double() - ga.double()
            if not bool(torch.isfinite(diff).all()):
                raise ConfigError(f"pair {kind}: the step's output is not finite")
            row = {**_gaussian_pair(kind, index, diff, step.sensitivity, step.sigma, self.request, self.claim,
                                    sorted(pins), [int(xa.shape[0]), int(xb.shape[0])]), **info}
            if row["verdict"] == "refuted" and self.request.out_dir is not None:
                row["witness"] = _save_witness(self.request.out_dir, self.name, kind, step, xa, xb, ga, gb, pins,
                                               rseed, {k: row[k] for k in WITNESS_META} | {"claim": self.claim})
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - one pair failing leaves the others
            row = {"pair": kind, "verdict": "error", "error": f"{type(exc).__name__}: {exc}"}
        row["seconds"] = round(time.perf_counter() - start, 3)
        return row


#: the row's fields a gradient step's witness header repeats
WITNESS_META = ("mu_lower", "epsilon_lower", "mu_pair", "difference_norm", "sensitivity_claimed", "noise_std")


def audit_defense(name: str, *, params: Mapping[str, Any] | None = None, target_epsilon: float | None = 8.0,
                  noise_multiplier: float | None = None, delta: float = 1e-5, draws: int = DEFAULT_DRAWS,
                  pair: str = "all", alpha: float = 0.05, seed: int = 0, dataset: str = "digits",
                  data_dir: str | None = None, noise: str = "projected",
                  witness_evaluations: int = DEFAULT_WITNESS_EVALUATIONS, out_dir: str | Path | None = None,
                  context: Any = None) -> StepAudit:
    """Audit one defense's privatised step (see module doc). ``context``: a sensitivity register
    :class:`~privaudit.audit.sensitivity.register.Context` to reuse (its data and built quantities)."""
    from privaudit.audit.sensitivity.register import Context

    if name not in DEFENSES:
        raise one_of("defense", name, DEFENSES)
    kinds = pair_choices(pair)
    check_positive("draws", draws)
    if draws < 8:
        raise ConfigError(f"draws: need at least 8 per side, got {draws}")
    check_probability("alpha", alpha)
    check_probability("delta", delta)
    for field, value in (("target_epsilon", target_epsilon), ("noise_multiplier", noise_multiplier)):
        if value is not None:  # inf: a claim of nothing, zero: division by zero; neither is a step to audit
            check_positive(field, value, finite=True)
    if not (isinstance(witness_evaluations, int) and witness_evaluations >= 1):
        raise ConfigError(f"witness_evaluations: must be an integer >= 1, got {witness_evaluations!r}")
    if noise not in NOISE_MODES:
        raise one_of("noise", noise, NOISE_MODES)
    if name in FEDERATED and kinds == PAIRS and pair == "all":
        kinds = ("canary", "extreme")  # the aggregation has no witness pair (see _federated_step)
    request = StepRequest(dict(params or {}), target_epsilon, noise_multiplier, delta, draws, kinds, alpha, seed,
                          noise, dataset, witness_evaluations, Path(out_dir) if out_dir is not None else None)
    if name in FEDERATED:
        from privaudit.core.datasets import load_dataset
        from privaudit.defenses.registry import make_defense

        data = context.data if context is not None else load_dataset(dataset, seed=seed, data_dir=data_dir)
        return _federated_step(name, make_defense(name, dict(request.params)), data, request)
    ctx = context or Context(seed, dataset, data_dir)
    if name in RELEASES:
        from privaudit.audit.step.release import audit_release

        return audit_release(name, ctx, request)
    return _GradientAudit(name, ctx, request).run()


def trained_multipliers(claim: Any, trace: Mapping[str, Any]) -> dict[str, float]:
    """(z_actual, z_claimed, z_effective) of a run that happened: the smallest gradient multiplier any step of its
    trace used (noise std over sensitivity), and the claim's gradient and effective multipliers."""
    stds, sens = trace["noise_std"], trace["sensitivity"]
    if not stds:
        raise ConfigError("step audit: the run's trace has no step")
    params = claim.params
    claimed = params.get("noise_multipliers") or {}
    if not claimed:
        raise ConfigError("step audit: the claim records no noise multipliers (not a DP-SGD-style claim)")
    return {"z_actual": min(float(s) / float(d) for s, d in zip(stds, sens)),
            "z_claimed": float(next(iter(claimed.values()))),
            "z_effective": float(params.get("effective_noise_multiplier", 0.0)), "epsilon_run": None}


def trained_model(defense: Any, trained: Any, data: Any, seed: int) -> tuple[torch.nn.Module, str]:
    """The model a run's last step ran at (its trained parameters), and where they came from. The released model
    is the trained one for every defense here but DP-GCL's two towers (only the first is released): there the
    seeded initial model stands in, and the note says so."""
    model = defense.build(defense.model_spec(data.info), seed)
    try:
        model.load_state_dict(trained.model.state_dict())
    except RuntimeError:
        return model, "the seeded initial model (the released model is only part of the trained one)"
    return model, "the trained parameters"


def audit_trained_step(name: str, params: Mapping[str, Any], trained: Any, data: Any, *, target_epsilon: float | None,
                       delta: float, draws: int = DEFAULT_DRAWS, alpha: float = 0.05, seed: int = 0,
                       noise: str = "projected") -> StepAudit:
    """The step a run actually ran, audited on the canonical pairs (canary, extreme): its configuration
    (``params``: clip, batch size or sampling rate, grouping), the noise its trace records (the smallest of any
    step), its claim's per-step mu and its trained parameters. A planted under-noising shows as mu_lb > mu."""
    from types import SimpleNamespace

    check_positive("draws", draws)
    check_probability("alpha", alpha)
    request = StepRequest(dict(params), target_epsilon, None, delta, draws, ("canary", "extreme"), alpha, seed, noise,
                          data.info.name, DEFAULT_WITNESS_EVALUATIONS, None)
    z = trained_multipliers(trained.claim, trained.extras["trace"])
    # The canary and extreme pairs evaluate nothing differentiably: the training's own engine (layerwise where it
    # applies) serves them, 30 times faster than vmap for DP-SGD's dense term units at batch 256
    audit = _GradientAudit(name, SimpleNamespace(data=data), request, z=z, engine="auto")
    audit._model, where = trained_model(audit.defense, trained, data, seed)
    result = audit.run()
    return dataclasses.replace(result, settings={**result.settings, "model": where, "noise_from": "the run's trace"})


def validate_defenses(names: Any, where: str = "defenses") -> tuple[str, ...]:
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where}: expected a non-empty list of defense names; accepted: {', '.join(DEFENSES)}")
    for n in names:
        if n not in DEFENSES:
            raise one_of(where, n, DEFENSES)
    return tuple(names)


__all__ = ["audit_defense", "StepAudit", "DEFENSES", "PAIRS", "PAIR_CHOICES", "DEFAULT_DRAWS"]


