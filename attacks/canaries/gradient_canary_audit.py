"""Attack ``gradient-canary``: the white-box one-run audit of a DP-SGD-style defense with Dirac gradient canaries,
run through the defense's own engine (orchestration; the maths and the argument are
:mod:`privaudit.attacks.canaries.gradient_canary`, the bounds from the finished scores
:mod:`privaudit.attacks.canaries.canary_audit`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from privaudit.attacks.base import Attack, Target
from privaudit.attacks.bounds.lower_bound import check_relation_unit
from privaudit.attacks.bounds.trajectory import step_multiplier
from privaudit.attacks.canaries.canary_audit import CanaryAuditConfig, canary_audit_result, track_claimed_trajectory
from privaudit.attacks.executor import Executor
from privaudit.attacks.canaries.gradient_canary import GradientCanaries
from privaudit.attacks.bounds.release_trajectory import combined_trajectory_bound
from privaudit.attacks.canaries.release_probes import ReleaseTrials
from privaudit.attacks.result import AttackResult
from privaudit.core.errors import ConfigError
from privaudit.defenses.training.seeding import torch_generator

@dataclass(frozen=True)
class GradientCanaryConfig(CanaryAuditConfig):
    """:class:`CanaryAuditConfig` for Dirac gradient canaries: the idealised step's likelihood-ratio score, the
    mechanism bound and the trajectory bound on by default. ``release_probes``: where the defense's step also
    releases other noised statistics (DPCL: SimCLR's similarity matrix, Barlow Twins' means and SSEs), probe that many
    entries of each at every step (:mod:`privaudit.attacks.canaries.release_probes`; at most all of them) and bound the
    whole
    step (:mod:`privaudit.attacks.bounds.release_trajectory`); 0 leaves the bound on the gradient release alone."""

    score: str = "llr"
    mechanism: bool = True
    trajectory: bool = True
    release_probes: int = 1024

    def validate(self) -> None:
        super().validate()
        if isinstance(self.release_probes, bool) or not isinstance(self.release_probes, int) \
                or self.release_probes < 0:
            raise ConfigError(f"release_probes: must be an integer >= 0 (0: off), got {self.release_probes!r}")
        if self.relation is not None:
            check_relation_unit(self.relation, "example", what="attack 'gradient-canary'")


#: (sampler, relation) pairs the engine's canaries can be sampled for, and how: Poisson add/remove (a canary
#: joins a step with rate q, an example added or removed) and without-replacement replace-one (paired slots).
SUPPORTED = {("poisson", "add-remove"): False, ("without-replacement", "replace-one"): True}


class GradientCanaryAudit(Attack):
    """White-box one-run audit of a DP-SGD-style defense with Dirac gradient canaries (module docstring)."""

    name = "gradient-canary"
    Config = GradientCanaryConfig
    needs_model = False
    needs_nonmembers = False  # its canaries are its own units, drawn by the auditor's coins

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        from privaudit.defenses.dp import DPDefense, dirac_canaries

        cfg = self.config
        defense = self.audited_defense(target, DPDefense, "DP-SGD engine to insert gradient canaries into; use it with "
                                                          "dpsgd, dp-clip, dp-gcl, logit-dp or dpcl-*")
        probe = defense.prepare(target.data, target.budget, target.seed, device=target.device)
        claim = probe.claim
        sampler = probe.plan.sampler
        supported = [(r, "example") for (smp, r) in SUPPORTED if smp == sampler]
        relation = self.audited_relation(target, claim.relation, claim.unit, supported, batches=sampler)
        paired = SUPPORTED[(sampler, relation)]
        dp = probe.extras["dp"]
        dim, bound, rate = int(dp["param_count"]), float(dp["canary_bound"]), probe.plan.sample_rate
        m = cfg.count(dim)
        if m > dim:
            raise ConfigError(f"canaries: {m} Dirac canaries need at least as many trainable "
                              f"parameters; the model has {dim}")
        norm = bound / 2 if paired else bound
        noise_std = float(dp["gradient_noise_std"])
        canaries = GradientCanaries(dim, m, clip_norm=norm, kind="dirac",
                                    seed=target.derive_seed("gradient-canary"), paired=paired, score=cfg.score,
                                    rate=rate, noise_std=noise_std, probes=cfg.probes and cfg.trajectory,
                                    tensors=list(zip(dp["param_names"], dp["param_numels"])))
        coords = torch.as_tensor(canaries.directions)
        inserted = torch.as_tensor(canaries.inserted)
        signs = inserted.double() * 2 - 1
        sampling = torch_generator(target.derive_seed("gradient-canary"), "poisson")
        track_claimed_trajectory(canaries, cfg, multiplier=step_multiplier(claim.event, claim.params),
                                 steps=probe.plan.steps)

        on = bool(cfg.release_probes and cfg.trajectory and cfg.centred and cfg.probes)
        groups = release_trials(defense.probed_releases(probe.plan, probe.model) if on else {}, cfg.release_probes,
                                claim.params, steps=probe.plan.steps, beta=cfg.beta,
                                seed=target.derive_seed("release-probes"))

        def source(t: int):
            sampled = torch.rand(m, generator=sampling) < rate
            probe = canaries.step_probes()  # +-1 (or None): its own generator, the sampling's stream unchanged
            values = None if probe is None else probe * (canaries.spread / 2)
            observer = lambda noisy: canaries.observe(t, noisy, sampled, probe)  # noqa: E731
            releases = {name: p for g in groups for name, p in g.step_probes().items()} or None
            if paired:  # every slot holds one candidate; it joins the step with the marginal rate q
                return dirac_canaries(coords, norm, sampled, observer=observer, signs=signs, centred=cfg.centred,
                                      probes=values, releases=releases)
            return dirac_canaries(coords, norm, inserted & sampled, observer=observer, centred=cfg.centred,
                                  probes=values, releases=releases)

        defense.fit(target.data, target.budget, target.seed, device=target.device, progress=progress,
                    canaries=source)
        delta = cfg.delta if cfg.delta is not None else claim.delta
        result = canary_audit_result(canaries, cfg, steps=probe.plan.steps, delta=delta,
                                     seed=target.derive_seed("planned-guesses"), unit="example", event=claim.event,
                                     claim_params=claim.params)
        result = with_release_trials(result, groups, claim.params, cfg.beta)
        if paired:
            what = (f"white-box: {m} paired replace-one Dirac slots (+-Delta/2 e_j, Delta={bound:.4g} the replace-one "
                    f"gradient sensitivity; a fair coin picks the sign), each taking part with the sampler's marginal "
                    f"rate q={rate:.4g} at each of {canaries.steps} steps")
        else:
            what = (f"white-box: {m} Dirac canaries of norm Delta={bound:.4g} (the gradient sensitivity), "
                    f"each sampled with the defense's rate q={rate:.4g} at each of {canaries.steps} steps")
        bound_with_notes = dataclasses.replace(result.bound, notes=result.bound.notes + (what,))
        counts = {**result.counts, "sample_rate": rate, "canary_norm": norm,
                  "release_probes": sum(g.k for g in groups)}
        return dataclasses.replace(result, bound=bound_with_notes, counts=counts,
                                   config={**result.config, **self.config_dict(), "defense": target.defense})


def release_trials(releases: dict[str, int], k: int, params: dict, *, steps: int, beta: float,
                   seed: int) -> list[ReleaseTrials]:
    """The release probes' trials of the defense's probed ``releases`` (name -> entries) that the claim accounts (a
    release it leaves out has no claimed noise to test: the training trace names it), one group per claimed
    multiplier (releases of equal multipliers pooled), each planned at beta / (1 + groups); none without releases."""
    zs, ds = params.get("noise_multipliers") or {}, params.get("sensitivities") or {}
    by_z: dict[float, dict[str, tuple[int, float]]] = {}
    for name, numel in releases.items():
        if name not in zs or name not in ds:
            continue
        by_z.setdefault(round(float(zs[name]), 12), {})[name] = (numel, float(ds[name]))
    share = beta / (1 + len(by_z))
    return [ReleaseTrials(group, k, multiplier=z, steps=steps, beta=share, seed=seed)
            for z, group in sorted(by_z.items())]


def with_release_trials(result: AttackResult, groups: list[ReleaseTrials], params: dict,
                        beta: float) -> AttackResult:
    """``result`` with its trajectory bound extended to the release trials (the whole step, compared with the whole
    claim: :mod:`privaudit.attacks.bounds.release_trajectory`); unchanged without trials."""
    if not groups or result.trajectory_bound is None:
        return result
    if any(g.steps == 0 for g in groups):
        note = "release probes set but never observed: the trajectory bound is on the gradient release alone"
        return dataclasses.replace(result, bound=dataclasses.replace(result.bound, notes=result.bound.notes + (note,)))
    bound = combined_trajectory_bound(result.trajectory_bound, [g.to_dict() for g in groups],
                                      gradient_multiplier=float(params["noise_multipliers"]["gradient"]), beta=beta)
    return dataclasses.replace(result, trajectory_bound=bound)
