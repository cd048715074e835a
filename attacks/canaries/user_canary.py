"""White-box canary users for the user-level federated defenses (DP-FedEmb, DP-FedAvg).

A canary user (Steinke, Nasr & Jagielski 2023, Sec. 6 white-box, lifted to users; Nasr et al. 2023
Dirac canaries) is a privacy unit whose clipped model update is a Dirac of norm gamma (the round's
clip norm) on its own coordinate e_j of the aggregated parameters, in every round it is sampled.
The audit inserts the canary users through the defense's aggregation hook
(:func:`privaudit.defenses.fedemb.aggregate.noised_mean`): their update is added to the sum of clipped deltas
before the noise, and the auditor scores slot j by sum_t <noisy sum_t, e_j>.

Two games, chosen by the relation the bound is stated at (``relation``; default the claim's):

* ``replace-one`` (DP-FedEmb's and DP-FedAvg's claims, App. C): **paired** canary users. Slot j holds
  two candidate users whose clipped updates are +gamma e_j and -gamma e_j (their difference 2 gamma is
  the replace-one sensitivity of the sum the noise is calibrated to, sigma / 2 the event multiplier);
  a fair coin picks which of the two is in the population, so the number of users never changes. The
  slot takes part in a round with the sampler's marginal rate q = users per round / users. Given
  every other slot, the two outputs of a round are (1 - q) P_0 + q N(s + gamma e_j) and
  (1 - q) P_0 + q N(s - gamma e_j): the pair the without-replacement replace-one accountant bounds.
  :func:`privaudit.attacks.bounds.one_run.paired_one_run_bound` with ``unit="user"``.
* ``add-remove``: whole canary users, each in the population with probability 1/2, update gamma e_j
  when sampled (rate q); :func:`privaudit.attacks.bounds.one_run.one_run_bound` with ``unit="user"``. (Not comparable
  with a replace-one claim; offered for user-level add/remove claims.)

The reported bound is the larger of Steinke's and the f-DP one-run bound at beta / 2 each
(:func:`privaudit.attacks.bounds.fdp.best_one_run_bound`), as for the gradient canaries.

``mechanism_bound`` (``eps_lb_mechanism``, on by default) is the one-run f-DP bound against the claim's own
mechanism (:mod:`privaudit.attacks.bounds.mechanism`), at beta, as for the gradient canaries. Why it is sound for the
paired (replace-one) game:

1. *Each slot's pair is dominated by the claim's.* Fix every other slot's coin and participation and the
   real users. In a round, the slot is absent with probability 1 - q (output law R) or present with its
   candidate +gamma e_j (law A) or -gamma e_j (law A'), so the two coins give q A + (1 - q) R and
   q A' + (1 - q) R. A and A' are Gaussians of std sigma gamma whose means differ by 2 gamma (the
   replace-one sensitivity the noise is calibrated to, event multiplier z = sigma / 2), and R's mean is
   gamma from each: in noise units each of (A, A'), (A, R), (A', R) is dominated by (G, G0) = (N(1, z^2),
   N(0, z^2)). Advanced joint convexity then bounds the mixtures' hockey-stick divergences by those of
   (q G + (1 - q) G0, G0), the without-replacement replace-one pair the claim's event is accounted with
   (:mod:`privaudit.accountants.pld.pld`, both orders), and the rounds compose adaptively: the run is f-DP with respect
   to each slot's coin, f the claim's own (symmetric) curve: the hypothesis H_1 of the bisection holds (and
   H_s for every s <= 1), so P[eps_lb_mechanism > the claim's epsilon] <= beta. With adaptive clipping the canary moves
   by the round's clip norm and the noise scales with it; the claim's event then also accounts the count query (z <
   sigma / 2), so it still dominates.
2. *The guesses are one-sided.* The recursion (:func:`privaudit.attacks.bounds.fdp.fdp_recursion_rejects`) is that of
   Mahloujifar, Melis & Chaudhuri 2025 for one-sided "member" guesses on independent fair coins. Here the
   coin is "the + candidate is the one in the population" and the k+ guesses are "+" on the highest scores
   (:func:`privaudit.attacks.bounds.fdp.one_sided_counts`): exactly that game with "member" read as "+". The score need
   not be the likelihood ratio; any score fixed before the run is sound. (Guessing "-" on the lowest scores
   too would use the recursion outside the one-sided game it is stated for; we do not.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from privaudit.attacks.base import Attack, Target
from privaudit.attacks.bounds.lower_bound import check_relation_unit
from privaudit.attacks.executor import Executor
from privaudit.attacks.canaries.canary_audit import CanaryAuditConfig, canary_audit_result, track_claimed_trajectory
from privaudit.attacks.canaries.gradient_canary import GradientCanaries
from privaudit.attacks.result import AttackResult
from privaudit.core.errors import ConfigError
from privaudit.defenses.training.seeding import torch_generator

SUPPORTED = (("replace-one", "user"), ("add-remove", "user"))


@dataclass(frozen=True)
class UserCanaryConfig(CanaryAuditConfig):
    """:class:`privaudit.attacks.canaries.canary_audit.CanaryAuditConfig` for canary users (the real clients' clipped
    sum is removed from the observed sum with ``centred``; k chosen by simulating the claim's idealised mechanism).
    ``relation``: None = the claim's. ``mechanism``: the bound against the claim's own mechanism, on by
    default (module docstring)."""

    mechanism: bool = True
    trajectory: bool = True

    def validate(self) -> None:
        super().validate()
        if self.relation is not None:
            check_relation_unit(self.relation, "user", SUPPORTED, what="attack 'user-canary'")


class CanaryUsers:
    """The canary users of one audit, inserted through the federated defense's aggregation hook.

    ``hook(t)`` is the defense's ``canaries`` argument: in round t it samples each slot with rate q, adds the
    sampled slots' updates (+-gamma e_j paired, gamma e_j for inserted add/remove users) to the sum of clipped
    deltas, and observes the noisy sum (less the real clients' clipped sum with ``centred``). The canaries are
    set up at the first round, when the aggregated parameters' shapes are known.
    """

    def __init__(self, cfg: UserCanaryConfig, seed: int, *, paired: bool, rate: float, gamma: float, noise_std: float,
                 rounds: int):
        self.cfg, self.seed, self.paired, self.rounds = cfg, seed, paired, rounds
        self.rate, self.gamma, self.noise_std = rate, gamma, noise_std
        self.sampling = torch_generator(seed, "rounds")
        self.canaries: GradientCanaries | None = None
        self.names: list[str] = []
        self.shapes: list[tuple[int, ...]] = []

    def setup(self, deltas: dict[str, torch.Tensor]) -> GradientCanaries:
        if self.canaries is None:
            self.names = list(deltas)
            self.shapes = [tuple(deltas[n].shape[1:]) for n in self.names]
            dim = int(sum(int(np.prod(s)) for s in self.shapes))
            self.canaries = GradientCanaries(dim, self.cfg.count(dim), clip_norm=self.gamma, seed=self.seed,
                                             paired=self.paired, score=self.cfg.score, rate=self.rate,
                                             noise_std=self.noise_std, probes=self.cfg.probes and self.cfg.trajectory,
                                             tensors=[(n, int(np.prod(s))) for n, s in zip(self.names, self.shapes)])
            spread = 2 * self.gamma if self.paired else self.gamma  # the hypotheses' mean difference D
            track_claimed_trajectory(self.canaries, self.cfg, multiplier=self.noise_std / spread, steps=self.rounds)
        return self.canaries

    def hook(self, t: int):
        return lambda deltas, clip_norm: self.insert(t, deltas, clip_norm)

    def insert(self, t: int, deltas: dict[str, torch.Tensor], clip_norm: float):
        """Round t: the canaries' sum by parameter (the trajectory probes included), the observer of the noisy sum,
        and the probes by parameter (withdrawn from the update after the observer; None without probes). The probes
        are +-(their spread / 2) in units of gamma, at the round's clip as the canaries are."""
        can = self.setup(deltas)
        coords = torch.as_tensor(can.directions)
        sampled = torch.rand(can.m, generator=self.sampling) < self.rate
        inserted = torch.as_tensor(can.inserted)
        flat = torch.zeros(can.dim, dtype=torch.float64)
        if self.paired:
            flat.index_add_(0, coords[sampled], clip_norm * (inserted[sampled].double() * 2 - 1))
        else:
            keep = sampled & inserted
            flat.index_add_(0, coords[keep], torch.full((int(keep.sum()),), float(clip_norm), dtype=torch.float64))
        probe = can.step_probes()
        probes = None
        if probe is not None:
            probes = torch.zeros(can.dim, dtype=torch.float64).index_add_(
                0, coords, probe * (can.spread / 2) * (clip_norm / self.gamma))
            flat = flat + probes
        names, centred = self.names, self.cfg.centred
        scale = clip_norm / self.gamma  # an adaptive clip moves the canaries: the observer reads gamma's units

        def observer(noisy: dict[str, torch.Tensor], data: dict[str, torch.Tensor]) -> None:
            seen = {n: noisy[n] - data[n] if centred else noisy[n] for n in names}
            flat_seen = torch.cat([seen[n].flatten().double().cpu() for n in names])
            can.observe(t, flat_seen if scale == 1.0 else flat_seen / scale, sampled.numpy(), probe)

        return self._by_parameter(flat), observer, None if probes is None else self._by_parameter(probes)

    def _by_parameter(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """A flat vector of the aggregated parameters' layout split by parameter."""
        parts, offset = {}, 0
        for name, shape in zip(self.names, self.shapes):
            size = int(np.prod(shape))
            parts[name] = flat[offset:offset + size].view(shape)
            offset += size
        return parts


class UserCanaryAudit(Attack):
    """White-box one-run audit of DP-FedEmb / DP-FedAvg with canary users (module docstring)."""

    name = "user-canary"
    Config = UserCanaryConfig
    needs_model = False
    needs_nonmembers = False  # its canaries are its own units, drawn by the auditor's coins

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        from privaudit.defenses.fedemb.defense import _Federated

        cfg = self.config
        defense = self.audited_defense(target, _Federated, "federated aggregation to insert canary users into; use "
                                                           "it with dp-fedemb or dp-fedavg")
        # the federated defenses' claim (round_claim): replace-one, per user
        relation = self.audited_relation(target, "replace-one", "user", SUPPORTED, name_the_defense=True)
        paired = relation == "replace-one"
        num_users = len(defense.users(target.data, target.seed))
        rate = min(1.0, defense.config.users_per_round / num_users)
        gamma = float(defense.config.clip_norm)
        noise_std = defense.noise_plan(target.budget, num_users).sigma * gamma
        users = CanaryUsers(cfg, target.derive_seed("user-canary"), paired=paired, rate=rate, gamma=gamma,
                            noise_std=noise_std, rounds=defense.config.rounds)
        trained = defense.fit(target.data, target.budget, target.seed, device=target.device, progress=progress,
                              canaries=users.hook)
        if users.canaries is None:
            raise ConfigError("attack 'user-canary': the defense ran no aggregation round")
        can = users.canaries
        delta = cfg.delta if cfg.delta is not None else float(trained.claim.delta)
        result = canary_audit_result(can, cfg, steps=defense.config.rounds, delta=delta,
                                     seed=target.derive_seed("planned-guesses"), unit="user", event=trained.claim.event,
                                     claim_params=trained.claim.params)
        bound = dataclasses.replace(result.bound, notes=result.bound.notes + (
            (f"white-box: {can.m} paired canary-user slots (+-gamma e_j, a fair coin picks the sign) "
             if paired else f"white-box: {can.m} canary users (gamma e_j, each in the population with probability "
                            "1/2) ") + f"taking part with rate q={rate:.4g} in each of {can.steps} rounds",))
        return dataclasses.replace(result, attack="user-canary", bound=bound,
                                   counts={**result.counts, "sample_rate": rate, "num_users": num_users},
                                   config={**result.config, **self.config_dict(), "defense": target.defense})
