"""White-box gradient canaries inside the user's Opacus optimizer step, scored as
:mod:`privaudit.attacks.canaries.gradient_canary` scores the engine's.

Placement (the hook of :mod:`privaudit.defenses.dp.release.step`, called by
:mod:`privaudit.defenses.watch.opacus_step`): m
Dirac
canaries on distinct coordinates of the optimizer's flat parameter layout (placed so that every parameter tensor
holds some), each inserted by a fair coin, each taking part in every release independently with the accountant's
sample rate q, at norm C = the optimizer's ``max_grad_norm`` (the sensitivity its noise z C is calibrated to),
added to the clipped sum before Opacus adds its noise. The observer gets the noisy sum less the data's clipped sum.
Each canary is then an example the claim covers, sampled as the accountant assumes, so the one-run bounds, the
trajectory bound and the released-noise checks are those of the engine's canaries, sound against the claim (the
canaries are planned from the first release's (z, q, C); the trajectory bound is stated only when the claim's
every step has rate >= q and multiplier z, so a canary is never sampled more often than the claim's examples).
The one-run f-DP bound against the claim's own mechanism is not computed here: with every step observed the
trajectory bound is the verdict's, and the mechanism bound's scale search cost more than the training it audits.
"""

from __future__ import annotations

from typing import Any

import torch

from privaudit.attacks.canaries.canary_audit import canary_audit_result, track_claimed_trajectory
from privaudit.attacks.canaries.gradient_canary import GradientCanaries
from privaudit.attacks.canaries.gradient_canary_audit import GradientCanaryConfig
from privaudit.defenses.dp.release.step import dirac_canaries
from privaudit.defenses.training.seeding import derive_seed, torch_generator

#: The ceiling's per-step mu is capped at this multiple of the claim's (:func:`trajectory_ceiling`).
CEILING_MU_FACTOR = 3.0
#: A capped ceiling's grid, in multiples of the bound's (:func:`trajectory_ceiling`).
CEILING_COARSENING = 10.0


def plan_canaries(tensors: list[tuple[str, int]], *, clip: float, multiplier: float, rate: float, seed: int,
                  beta: float, steps_planned: int) -> tuple[GradientCanaries, GradientCanaryConfig, Any]:
    """(the canaries, their config, the hook's source) for a layout of ``tensors`` at the first release's values."""
    dim = sum(k for _, k in tensors)
    cfg = GradientCanaryConfig(beta=beta, mechanism=False)
    m = cfg.count(dim)
    canaries = GradientCanaries(dim, m, clip_norm=clip, kind="dirac", seed=derive_seed(seed, "training-canaries"),
                                score=cfg.score, rate=rate, noise_std=multiplier * clip, tensors=tensors,
                                probes=cfg.probes)
    track_claimed_trajectory(canaries, cfg, multiplier=multiplier, steps=max(1, steps_planned))
    coords, inserted = torch.as_tensor(canaries.directions), torch.as_tensor(canaries.inserted)
    sampling = torch_generator(derive_seed(seed, "training-canaries"), "poisson")

    def source(t: int):
        sampled = torch.rand(m, generator=sampling) < rate
        probe = canaries.step_probes()
        return dirac_canaries(coords, clip, inserted & sampled, centred=True,
                              probes=None if probe is None else probe * (clip / 2),
                              observer=lambda noisy: canaries.observe(t, noisy, sampled.numpy(), probe))

    return canaries, cfg, source


def claim_fits(event: Any, rate: float, multiplier: float) -> str | None:
    """Why the canaries (sampled at ``rate``, planned at ``multiplier``) cannot be judged against the claim's
    ``event`` (None: they can: every claimed step is Poisson at rate >= ``rate`` with this multiplier)."""
    from privaudit.accountants.trace.trace_record import claimed_steps

    for s in claimed_steps(event):
        if isinstance(s, str) or s.sampler != "poisson":
            return f"the claim's step {s if isinstance(s, str) else s.sampler} is not a Poisson-sampled Gaussian"
        if s.rate < rate * (1 - 1e-9) or abs(s.multiplier - multiplier) > 1e-9 * multiplier:
            return (f"the claim's steps (rate {s.rate:.6g}, multiplier {s.multiplier:.6g}) are not the first "
                    f"release's (rate {rate:.6g}, multiplier {multiplier:.6g}) the canaries were planned at")
    return None


def canary_result(canaries: GradientCanaries, cfg: GradientCanaryConfig, *, claim: Any, steps: int,
                  delta: float, seed: int, rate: float, multiplier: float) -> Any:
    """The canaries' :class:`~privaudit.attacks.result.AttackResult`: the one-run and trajectory bounds against the
    claim's event when :func:`claim_fits` (the one-run bound then at its default guesses, fixed before any score:
    the trajectory bound is the verdict's), else the one-run bound alone, its guesses planned from the claim (with the
    reason noted)."""
    import dataclasses

    reason = claim_fits(claim.event, rate, multiplier)
    event = None if reason is not None else claim.event
    if reason is None:  # the trajectory bound is the verdict's: the one-run bound's guesses need no planning
        cfg = dataclasses.replace(cfg, plan_guesses=False)
    result = canary_audit_result(canaries, cfg, steps=steps, delta=delta, seed=derive_seed(seed, "planned-guesses"),
                                 unit="example", event=event)
    if reason is not None:
        result.bound = dataclasses.replace(result.bound, notes=result.bound.notes + (f"no trajectory bound: {reason}",))
    return result


def trajectory_ceiling(counts: dict[str, Any], event: Any, *, beta: float, delta: float,
                       multiplier: float) -> tuple[float, bool]:
    """(the largest trajectory bound these trial counts could give (no error on any trial), capped): its per-step mu
    is capped at :data:`CEILING_MU_FACTOR` times the claim's 1 / ``multiplier`` (capped True: the design can show at
    least this much; the uncapped PLD of a near-noiseless step costs seconds and only says "far above the claim").
    A capped ceiling is read on a grid :data:`CEILING_COARSENING` times the bound's: the optimistic epsilon of a
    coarser grid is lower, so "at least" still holds, at about a tenth of the cost (the PLD at three times the claim's
    mu was the analysis' largest part); an uncapped one, the design's real most, on the bound's own grid."""
    from privaudit.attacks.bounds.trajectory import mu_lower_form, trajectory_epsilon

    mu = float(mu_lower_form(counts.get("form", "two-sided"), 0, int(counts["n0"]), 0, int(counts["n1"]), beta=beta))
    cap = CEILING_MU_FACTOR / multiplier
    if mu > cap:
        return trajectory_epsilon(cap, event, "add-remove", delta, coarsening=CEILING_COARSENING), True
    return trajectory_epsilon(mu, event, "add-remove", delta), False


def bound_at_claim(event: Any, *, multiplier: float, delta: float) -> float:
    """The trajectory bound's value when its per-step mu_lb is the claim's 1 / ``multiplier`` exactly: what the bound
    reaches on a correct run as the trials grow (the optimistic PLD epsilon of the claim's steps; its ratio to an RDP
    epsilon is the bound's most on a correct run)."""
    from privaudit.attacks.bounds.trajectory import trajectory_epsilon

    return trajectory_epsilon(1.0 / multiplier, event, "add-remove", delta)


def noise_findings(counts: dict[str, Any], multiplier: float) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The released-noise checks on the canaries' residuals (:mod:`privaudit.attacks.noise.released_noise`,
    :mod:`privaudit.attacks.noise.noise_structure`): their records, and one finding per failing check."""
    from privaudit.attacks.noise.noise_structure import describe_failures, structure_checks
    from privaudit.attacks.noise.released_noise import describe_check, released_noise_check

    check = released_noise_check(counts, multiplier)
    structure = structure_checks(counts, multiplier)
    found = [{"check": "released noise", "message": "released noise: " + describe_check(check)}] \
        if check is not None and check["rejected"] else []
    found += [{"check": name, "message": text} for name, text in describe_failures(structure)]
    return {"released_noise": check, **structure}, found
