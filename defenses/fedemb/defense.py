"""DP-FedEmb and DP-FedAvg (Xu et al., "Learning to Generate Image Embeddings with User-level DP").

Both train the backbone (the encoder; its output h is the embedding) with user-level DP from
user-partitioned data held in the datacenter:

    for t in rounds:                                    (Algorithm 1 / Algorithm 2)
        sample users without replacement, group them into virtual clients
        each client: K local SGD steps from theta^(t)   (vmapped over clients, :mod:`.local`)
        clip each client's delta to gamma, sum, add N(0, (sigma gamma)^2), divide by |S|
        server optimizer (SGD with momentum) on the noised mean delta

* ``dp-fedemb`` (Algorithm 1): each virtual client trains a freshly initialised local softmax head
  over its own classes with learning rate beta_2 = head_lr_scale * beta_1; only the backbone delta
  is clipped, noised and aggregated; the heads are discarded (partial aggregation, Sec. 2.3).
* ``dp-fedavg`` (Algorithm 2, with virtual clients as the paper's baseline uses them): a global head
  over all classes is broadcast, trained locally (one learning rate beta) and aggregated and noised
  together with the backbone; it is released as ``Trained.classifier`` (bias fixed at zero).

Privacy (App. C): user-level, replace-one, users sampled without replacement each round, composed
over rounds — dp-accounting's RDP accountant (Wang, Balle & Kasiviswanathan 2019), as the paper
uses. The sum of clipped deltas has replace-one sensitivity 2 gamma, so the claim's noise
multiplier is sigma / 2; the paper's stated epsilons are reproduced exactly only by accounting
with sigma (e.g. DigiFace, Sec. 3.4: sigma = 1.39, 64 x 128 of 98,960 users, 800 rounds,
delta = 1e-5: 24.86 with sigma, 92.6 with sigma / 2). Both numbers are reported.
Public pretraining (Sec. 2.3): SimCLR on the public split (the paper pretrains on ImageNet).
Evaluation (Sec. 3.2): recall at FAR 1e-3 over all pairs of the held-out test images (digit classes
as identities), plus k-NN accuracy.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn as nn

from privaudit.accountants.calibrate import calibrate
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import GaussianDpEvent, SampledWithoutReplacementDpEvent, SelfComposedDpEvent
from privaudit.accountants.registry import epsilon as account
from privaudit.core.datasets import MembershipData
from privaudit.core.errors import ConfigError, check_positive, check_probability
from privaudit.defenses.base import Budget, Defense, PrivatizedQuantity, Trained
from privaudit.defenses.dp.release.as_run import replay_steps
from privaudit.defenses.evaluation.evaluation import embed, knn_accuracy, recall_at_far
from privaudit.defenses.fedemb.aggregate import (adaptive_clip_update, clipped_sum, count_stddev_for,
                                                 delta_noise_multiplier, event_noise_multiplier, noised_mean,
                                                 noised_release, split_noise)
from privaudit.defenses.fedemb.local import client_minibatches, local_train, stack_params
from privaudit.defenses.fedemb.trace import RoundTrace, round_replay
from privaudit.defenses.fedemb.users import RoundPlan, Users, partition_users, plan_round
from privaudit.defenses.nn.model import ContrastiveModel, build_model
from privaudit.defenses.nonprivate import train_contrastive
from privaudit.defenses.training.seeding import torch_generator
from privaudit.defenses.training.training import ContrastiveConfig

SOURCE = "DP-FedEmb (Xu et al.): Algorithm 1, Sec. 2.3, App. C"
SOURCE_FEDAVG = "DP-FedEmb (Xu et al.): Algorithm 2 (DP-FedAvg with virtual clients), App. B-C"


@dataclass(frozen=True)
class FedEmbConfig(ContrastiveConfig):
    """Federated hyper-parameters (Sec. 3.3's names) plus the contrastive fields for public pretraining.

    ``epochs``/``batch_size``/``lr``/...: SimCLR pretraining on the public split (``pretrain``).
    ``client_lr`` = beta_1, ``head_lr_scale`` = beta_2 / beta_1, ``server_lr`` = alpha,
    ``clip_norm`` = gamma (initial value under ``adaptive_clipping``). Users: the dataset's user
    ids, else seeded shards of ``examples_per_user`` examples from ``classes_per_user`` classes.
    """

    pretrain: bool = True
    rounds: int = 60
    clients_per_round: int = 4
    users_per_client: int = 4
    local_steps: int = 5
    local_batch_size: int = 16
    client_lr: float = 0.05
    head_lr_scale: float = 10.0
    client_momentum: float = 0.0
    server_lr: float = 1.0
    server_momentum: float = 0.9
    clip_norm: float = 0.2
    adaptive_clipping: bool = False
    target_unclipped_quantile: float = 0.5
    clip_learning_rate: float = 0.2
    clip_count_stddev: float | None = None  # None: the count query gets 5% of each round's RDP budget
    examples_per_user: int = 6
    classes_per_user: int = 1
    far: float = 1e-3
    client_chunk: int = 0  # virtual clients trained at once (stacked copies of the backbone); 0: all of a round's

    def validate(self) -> None:
        super().validate()
        for name in ("rounds", "clients_per_round", "users_per_client", "local_steps", "local_batch_size",
                     "client_lr", "head_lr_scale", "server_lr", "clip_norm", "clip_learning_rate",
                     "examples_per_user", "classes_per_user"):
            check_positive(name, getattr(self, name))
        for name in ("client_momentum", "server_momentum"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ConfigError(f"{name}: must lie in [0, 1), got {value!r}")
        check_positive("client_chunk", self.client_chunk, allow_zero=True)
        check_probability("target_unclipped_quantile", self.target_unclipped_quantile)
        check_probability("far", self.far)
        if self.clip_count_stddev is not None:
            check_positive("clip_count_stddev", self.clip_count_stddev)

    @property
    def users_per_round(self) -> int:
        return self.clients_per_round * self.users_per_client



@dataclass(frozen=True)
class FedAvgConfig(FedEmbConfig):
    """DP-FedAvg: one client learning rate for backbone and head (Algorithm 2), so the scale defaults to 1."""

    head_lr_scale: float = 1.0


@dataclass(frozen=True)
class NoisePlan:
    """sigma (noise std / clip on the delta sum), the round's replace-one event multiplier, the count noise."""

    sigma: float
    event_z: float
    count_stddev: float | None


def round_claim(event_z: float, num_users: int, users_per_round: int, rounds: int, delta: float, *,
                source: str = SOURCE, notes: tuple[str, ...] = (), params: dict[str, Any] | None = None) -> PrivacyClaim:
    """User-level, replace-one: ``rounds`` x [sample users_per_round of num_users w/o replacement, Gaussian(z)]."""
    event = SelfComposedDpEvent(SampledWithoutReplacementDpEvent(num_users, users_per_round, GaussianDpEvent(event_z)),
                                rounds)
    return PrivacyClaim(event, relation="replace-one", unit="user", delta=delta, paper_accountant="rdp",
                        sampler="without-replacement", source=source, notes=notes, params=params or {})


ROUND_HISTORY = ("step", "seconds", "loss", "clip_norm", "clipped_fraction", "update_norm", "delta_norm_median",
                 "diverged_fraction")


def record_round(history: dict[str, list[float]], t: int, seconds: float, loss: float, clip: float, aggregate) -> None:
    """Append round t's entries (:data:`ROUND_HISTORY`) from its aggregate (:func:`.aggregate.noised_mean`)."""
    history["step"].append(t)
    history["seconds"].append(seconds)
    history["loss"].append(loss)
    history["clip_norm"].append(clip)
    history["clipped_fraction"].append(aggregate.clipped_fraction)
    history["update_norm"].append(float(torch.sqrt(sum(u.pow(2).sum() for u in aggregate.update.values()))))
    history["delta_norm_median"].append(float(aggregate.norms.nan_to_num(float("inf")).median()))
    history["diverged_fraction"].append(aggregate.nonfinite_fraction)


def released_head(head: torch.Tensor, rep_dim: int, num_classes: int, device) -> nn.Linear:
    """DP-FedAvg's aggregated head as the released classifier (bias fixed at zero)."""
    classifier = torch.nn.utils.skip_init(nn.Linear, rep_dim, num_classes, device=device)
    with torch.no_grad():
        classifier.weight.copy_(head.detach())
        classifier.bias.zero_()
    return classifier.eval()


class _Federated(Defense):
    """The federated loop shared by DP-FedEmb and DP-FedAvg; ``aggregate_head`` tells them apart."""

    private = True
    aggregate_head: ClassVar[bool] = False
    Config = FedEmbConfig
    source: ClassVar[str] = SOURCE

    # -- data and model ----------------------------------------------------------------------------
    def users(self, data: MembershipData, seed: int) -> Users:
        cfg = self.config
        return partition_users(data.train.y, data.train.users, torch_generator(seed, "fedemb", "users"),
                               examples_per_user=cfg.examples_per_user, classes_per_user=cfg.classes_per_user)

    def initial_model(self, data: MembershipData, seed: int, device, progress: bool) -> tuple[ContrastiveModel, Any, dict]:
        cfg = self.config
        if cfg.pretrain:
            return train_contrastive(data.public.x, data.info, cfg, seed, device=device, progress=progress,
                                     desc=f"{self.name}: SimCLR on public")
        spec = cfg.model_spec(data.info)
        return build_model(spec, seed=seed).to(device), spec, {}

    def round_plans(self, num_users: int, seed: int):
        """The virtual clients of every round (users sampled without replacement, grouped consecutively)."""
        cfg = self.config
        gen = torch_generator(seed, "fedemb", "rounds")
        for _ in range(cfg.rounds):
            yield plan_round(num_users, cfg.clients_per_round, cfg.users_per_client, gen)

    # -- noise -------------------------------------------------------------------------------------
    def noise_plan(self, budget: Budget, num_users: int) -> NoisePlan:
        """sigma on the clipped sum, the round's event multiplier z and (adaptive clipping) sigma_b."""
        cfg = self.config
        adaptive, fixed_count = cfg.adaptive_clipping, cfg.clip_count_stddev
        if budget.noise_multiplier is not None:
            sigma = budget.noise_multiplier
            if sigma == 0:
                return NoisePlan(0.0, 0.0, None)
            if not adaptive:
                return NoisePlan(sigma, event_noise_multiplier(sigma), None)
            if fixed_count is not None:
                return NoisePlan(sigma, event_noise_multiplier(sigma, fixed_count), fixed_count)
            z, count_std = split_noise(sigma)
            return NoisePlan(sigma, z, count_std)
        if budget.target_epsilon is not None:
            delta = budget.resolve_delta(num_users)
            z = calibrate(lambda z: round_claim(z, num_users, cfg.users_per_round, cfg.rounds, delta),
                          budget.target_epsilon)
            count_std = None if not adaptive else (fixed_count if fixed_count is not None else count_stddev_for(z))
            return NoisePlan(delta_noise_multiplier(z, count_std), z, count_std)
        return NoisePlan(0.0, 0.0, None)

    def claim(self, noise: NoisePlan, num_users: int, delta: float, users: Users) -> tuple[PrivacyClaim, float | None]:
        """The claim this run implements, and the epsilon the paper's own accounting would state."""
        cfg = self.config
        if noise.event_z == 0:
            return PrivacyClaim.non_private(source=f"{self.source}; no noise (clipping only)"), None
        params = {"noise_multiplier": noise.sigma, "event_noise_multiplier": noise.event_z,
                  "clip_norm": cfg.clip_norm, "adaptive_clipping": cfg.adaptive_clipping,
                  "clip_count_stddev": noise.count_stddev, "num_users": num_users,
                  "users_per_round": cfg.users_per_round, "users_per_client": cfg.users_per_client,
                  "clients_per_round": cfg.clients_per_round, "rounds": cfg.rounds,
                  "aggregated": "backbone + head" if self.aggregate_head else "backbone only"}
        # The paper accounts with sigma itself (and Andrew et al.'s add/remove count sensitivity 1/2).
        paper_z = noise.sigma if noise.count_stddev is None else (noise.sigma ** -2 + (2 * noise.count_stddev) ** -2) ** -0.5
        paper = account(round_claim(paper_z, num_users, cfg.users_per_round, cfg.rounds, delta)).epsilon
        notes = [
            f"noise std sigma*gamma = {noise.sigma:.4g} x clip norm on the sum of clipped virtual-client deltas; one "
            f"user's replacement moves one client's clipped delta by up to 2*gamma, so the event's noise multiplier is "
            f"{noise.event_z:.4g}" + (" (sigma/2)" if noise.count_stddev is None else
                                      f" (sigma/2 composed with the clipped-count query, stddev {noise.count_stddev:.3g})"),
            f"the paper (App. C) accounts with noise multiplier {paper_z:.4g}; that gives epsilon {paper:.4g} at "
            f"delta {delta:.3g} under the same RDP accountant",
            f"users: {num_users} ({users.source}" + (f", {cfg.examples_per_user} examples from {cfg.classes_per_user} "
                                                     f"class(es) each)" if users.source != "dataset" else ")"),
        ]
        if cfg.adaptive_clipping:
            notes.append(f"adaptive clipping (Andrew et al. 2021): target quantile {cfg.target_unclipped_quantile}, "
                         f"clip learning rate {cfg.clip_learning_rate}, initial clip {cfg.clip_norm}")
        claim = round_claim(noise.event_z, num_users, cfg.users_per_round, cfg.rounds, delta, source=self.source,
                            notes=tuple(notes), params=params)
        return claim, paper

    # -- one round ---------------------------------------------------------------------------------
    def client_heads(self, client_labels: list[torch.Tensor], batch_labels: list[torch.Tensor], num_classes: int,
                     dim: int, global_head: torch.Tensor | None,
                     gen: torch.Generator) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        """Initial heads (C, L, E), each client's minibatch labels in head coordinates, and the (C, L) row mask.

        DP-FedEmb: one fresh row per class present in the client's data (``client_labels``); DP-FedAvg:
        the broadcast global head over all classes.
        """
        if self.aggregate_head:
            assert global_head is not None
            c = len(batch_labels)
            return (global_head.detach().unsqueeze(0).repeat(c, 1, 1), batch_labels,
                    torch.ones(c, num_classes, dtype=torch.bool))
        classes = [torch.unique(y) for y in client_labels]
        width = max(len(k) for k in classes)
        local = [torch.searchsorted(k, y) for k, y in zip(classes, batch_labels)]
        mask = torch.stack([torch.arange(width) < len(k) for k in classes])
        bound = 1.0 / math.sqrt(dim)  # nn.Linear's default initialisation range
        heads = (torch.rand(len(batch_labels), width, dim, generator=gen) * 2 - 1) * bound
        return heads, local, mask

    def run_round(self, encoder: nn.Module, head: nn.Parameter | None, plan: RoundPlan, users: Users,
                  x: torch.Tensor, y: torch.Tensor, num_classes: int, clip_norm: float, sigma: float,
                  gens: dict[str, torch.Generator], canary=None):
        """Local training of every virtual client, then the clipped, noised mean delta (Algorithm 1 l. 4–15)."""
        cfg = self.config
        device = x.device
        examples = plan.client_examples(users)
        idx = client_minibatches(examples, cfg.local_steps, cfg.local_batch_size, gens["batches"])
        y_cpu = y.cpu()
        batch_labels = [y_cpu[idx[c].flatten()] for c in range(len(examples))]
        client_labels = [y_cpu[e] for e in examples]
        dim = encoder.rep_dim if hasattr(encoder, "rep_dim") else int(head.shape[1])
        heads, local_labels, mask = self.client_heads(client_labels, batch_labels, num_classes, dim, head, gens["heads"])
        yb = torch.stack(local_labels).view(idx.shape).to(device)
        xb = x[idx.flatten().to(device)].view(*idx.shape, *x.shape[1:])
        heads, mask = heads.to(device), mask.to(device)
        if (cfg.client_chunk or len(examples)) >= len(examples):
            deltas, losses = self.local_deltas(encoder, head, heads, xb, yb, mask)
            hook = {} if canary is None else dict(zip(("canary", "observer", "withdrawn"), canary(deltas, clip_norm)))
            aggregate = noised_mean(deltas, clip_norm, sigma, gens["noise"], **hook)
        else:
            aggregate, losses = self.chunked_aggregate(encoder, head, heads, xb, yb, mask, clip_norm, sigma, gens,
                                                       canary)
        finite = losses[torch.isfinite(losses)]
        return aggregate, float(finite.mean()) if finite.numel() else float("nan")

    def chunked_aggregate(self, encoder: nn.Module, head: nn.Parameter | None, heads: torch.Tensor, xb: torch.Tensor,
                          yb: torch.Tensor, mask: torch.Tensor, clip_norm: float, sigma: float,
                          gens: dict[str, torch.Generator], canary=None):
        """The round's clients ``client_chunk`` at a time: each chunk's deltas are clipped and summed before the
        next chunk trains, so only one chunk's stacked backbones are held (the same sum in another float order)."""
        chunk = self.config.client_chunk
        sums: dict[str, torch.Tensor] = {}
        norms, losses, hook, entered = [], [], {}, 0.0
        for c0 in range(0, len(heads), chunk):
            part = slice(c0, c0 + chunk)
            deltas, loss = self.local_deltas(encoder, head, heads[part], xb[part], yb[part], mask[part])
            if canary is not None and not hook:
                hook = dict(zip(("canary", "observer", "withdrawn"), canary(deltas, clip_norm)))
            part_sums, part_norms, part_entered = clipped_sum(deltas, clip_norm)
            sums = part_sums if not sums else {k: sums[k] + v for k, v in part_sums.items()}
            norms.append(part_norms)
            entered = max(entered, part_entered)
            losses.append(loss)
            del deltas
        return (noised_release(sums, torch.cat(norms), clip_norm, sigma, gens["noise"], **hook, entered=entered),
                torch.cat(losses))

    def local_deltas(self, encoder: nn.Module, head: nn.Parameter | None, heads: torch.Tensor, xb: torch.Tensor,
                     yb: torch.Tensor, mask: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """K local steps of the clients whose heads and minibatches are given (:func:`.local.local_train`):
        their deltas from the round's backbone (and head, DP-FedAvg) and per-step losses (C, K)."""
        cfg = self.config
        start = {name: p.detach() for name, p in encoder.named_parameters()}
        result = local_train(encoder, stack_params(start, len(heads)), heads, xb, yb, mask,
                             lr_backbone=cfg.client_lr, lr_head=cfg.client_lr * cfg.head_lr_scale,
                             momentum=cfg.client_momentum)
        deltas = {name: result.params[name] - start[name].unsqueeze(0) for name in start}
        if self.aggregate_head:
            deltas["head"] = result.heads - head.detach().unsqueeze(0)
        return deltas, result.losses

    # -- fit ---------------------------------------------------------------------------------------
    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = True, canaries=None) -> Trained:
        """Train; ``canaries`` is the white-box canary-user hook: ``canaries(round) -> None | f`` with
        ``f(deltas, clip_norm) -> (canary sum, observer[, withdrawn])`` (see :func:`.aggregate.noised_mean`)."""
        start = time.perf_counter()
        users = self.users(data, seed)
        num_users = len(users)
        if self.config.users_per_round > num_users:
            raise ConfigError(f"clients_per_round x users_per_client: {self.config.users_per_round} users per round "
                              f"exceed the {num_users} users of the members")
        delta = budget.resolve_delta(num_users)
        noise = self.noise_plan(budget, num_users)
        model, spec, pre_history = self.initial_model(data, seed, device, progress)
        pretrain_seconds = time.perf_counter() - start
        pretrained_utility = self.evaluate(model, data, device)
        num_classes = data.info.num_classes
        head = self.global_head(num_classes, spec.rep_dim, seed, device) if self.aggregate_head else None
        t0 = time.perf_counter()
        recorder = RoundTrace(num_users, self.config.clip_norm) if noise.event_z > 0 else None
        history = self.train_rounds(model.encoder, head, data, users, noise, seed, device=device, progress=progress,
                                    canaries=canaries, recorder=recorder)
        train_seconds = time.perf_counter() - t0
        claim, paper_epsilon = self.claim(noise, num_users, delta, users)
        classifier = None if head is None else released_head(head, spec.rep_dim, num_classes, device)
        utility = self.evaluate(model, data, device)
        extras = {
            "utility": {"recall_at_far": utility["recall_at_far"], "far": utility["far"],
                        "recall_at_far_pretrained": pretrained_utility["recall_at_far"]},
            "evaluation": {"trained": utility, "pretrained": pretrained_utility},
            "users": {"num_users": num_users, "source": users.source, "examples_per_user_min": int(users.sizes().min()),
                      "examples_per_user_max": int(users.sizes().max())},
            "noise": {"sigma": noise.sigma, "event_noise_multiplier": noise.event_z,
                      "clip_count_stddev": noise.count_stddev, "delta": delta},
            "paper_epsilon": paper_epsilon,
            "pretrain_history": pre_history,
            "seconds": {"pretrain": pretrain_seconds, "federated": train_seconds},
        }
        if recorder is not None:
            extras["trace"] = recorder.trace(self.config.users_per_round).to_dict()
        return Trained(self.name, model, spec, claim, history, self.config_dict(), seed, classifier=classifier,
                       extras=extras)

    @staticmethod
    def global_head(num_classes: int, dim: int, seed: int, device) -> nn.Parameter:
        """DP-FedAvg's global head (C, E), drawn as nn.Linear draws its weights (U(-1/sqrt(E), 1/sqrt(E)))."""
        bound = 1.0 / math.sqrt(dim)
        init = (torch.rand(num_classes, dim, generator=torch_generator(seed, "fedemb", "global-head")) * 2 - 1) * bound
        return nn.Parameter(init.to(device))

    def train_rounds(self, encoder: nn.Module, head: nn.Parameter | None, data: MembershipData, users: Users,
                     noise: NoisePlan, seed: int, *, device, progress: bool, canaries,
                     recorder: RoundTrace | None = None) -> dict[str, list[float]]:
        """The federated rounds (Algorithm 1 / 2): each round's noised mean delta is the server optimizer's
        negative gradient; adaptive clipping (Andrew et al. 2021) moves the clip norm after each round. ``recorder``
        records every round as it ran (:mod:`privaudit.defenses.fedemb.trace`)."""
        from tqdm.auto import tqdm

        cfg = self.config
        server = torch.optim.SGD(list(encoder.parameters()) + ([] if head is None else [head]), lr=cfg.server_lr,
                                 momentum=cfg.server_momentum)
        gens = {k: torch_generator(seed, "fedemb", k) for k in ("batches", "heads", "noise", "clip")}
        x, y = data.train.x.to(device), data.train.y.to(device)
        clip = cfg.clip_norm
        history: dict[str, list[float]] = {key: [] for key in ROUND_HISTORY}
        encoder.train()
        t0 = time.perf_counter()
        bar = tqdm(total=cfg.rounds, desc=self.name, disable=None if progress else True, leave=False)
        try:
            to_replay = replay_steps(cfg.rounds) if recorder is not None else set()
            for t, plan in enumerate(self.round_plans(len(users), seed)):
                states = {k: g.get_state() for k, g in gens.items()} if t in to_replay else None
                aggregate, loss = self.run_round(encoder, head, plan, users, x, y, data.info.num_classes, clip,
                                                 noise.sigma, gens, canary=None if canaries is None else canaries(t))
                if states is not None:
                    recorder.replays.append(self.replayed_round(
                        t, encoder, head, plan, users, x, y, data.info.num_classes, clip, noise.sigma, gens, states,
                        base=aggregate if canaries is None else None))
                server.zero_grad(set_to_none=True)
                for name, p in encoder.named_parameters():
                    p.grad = -aggregate.update[name]
                if head is not None:
                    head.grad = -aggregate.update["head"]
                server.step()
                record_round(history, t, time.perf_counter() - t0, loss, clip, aggregate)
                if recorder is not None:
                    recorder.record(plan.users, aggregate, clip=clip, sigma=noise.sigma,
                                    count_std=noise.count_stddev if cfg.adaptive_clipping else None)
                if cfg.adaptive_clipping:
                    clip, _ = adaptive_clip_update(clip, aggregate.norms, target_quantile=cfg.target_unclipped_quantile,
                                                   learning_rate=cfg.clip_learning_rate,
                                                   count_stddev=noise.count_stddev if noise.event_z > 0 else 0.0,
                                                   gen=gens["clip"])
                bar.set_postfix(loss=f"{loss:.3f}")
                bar.update(1)
        finally:
            bar.close()
        encoder.eval()
        return history

    def replayed_round(self, t: int, encoder: nn.Module, head: nn.Parameter | None, plan: RoundPlan, users: Users,
                       x: torch.Tensor, y: torch.Tensor, num_classes: int, clip: float, sigma: float,
                       gens: dict[str, torch.Generator], states: dict[str, torch.Tensor], base=None) -> dict:
        """Round t's release replayed with one user replaced (:func:`.trace.round_replay`), from the generator
        ``states`` it started with (``base``: the round as it ran, when it had no canaries); the generators are left
        as the round left them."""
        after = {k: g.get_state() for k, g in gens.items()}

        def run(xs: torch.Tensor):
            for k, g in gens.items():
                g.set_state(states[k])
            return self.run_round(encoder, head, plan, users, xs, y, num_classes, clip, sigma, gens)[0]

        rows = users.examples[int(plan.clients[0][0])].to(x.device)
        try:
            return round_replay(t, run, x, rows, clip, base)
        finally:
            for k, g in gens.items():
                g.set_state(after[k])

    def evaluate(self, model: ContrastiveModel, data: MembershipData, device) -> dict[str, float]:
        """Recall at FAR (Sec. 3.2) over all test pairs, identities = labels; k-NN accuracy (members -> test)."""
        model.eval()
        test = embed(model.represent, data.test.x, device=device)
        members = embed(model.represent, data.train.x, device=device)
        r = recall_at_far(test, data.test.y, self.config.far)
        return {"recall_at_far": r.recall, "far": r.far_used, "far_requested": r.far_requested,
                "n_genuine": r.n_genuine, "n_impostor": r.n_impostor,
                "knn_accuracy": knn_accuracy(members, data.train.y, test, data.test.y)}

    # -- for the sensitivity checks ----------------------------------------------------------------
    def privatized_quantities(self, data: MembershipData, seed: int = 0, *, device: str | torch.device = "cpu",
                              progress: bool = False) -> list[PrivatizedQuantity]:
        """The sum of clipped virtual-client deltas of one round, from the round's starting backbone.

        ``fn((x, y, client), randomness)``: ``client`` (N,) assigns each example to a virtual client
        0..C-1; ``randomness`` (an int seed, shared by both neighbours) fixes the heads' initialisation
        and minibatch order. Any change confined to one client's data (one user's replacement is one)
        moves the output by at most 2 * clip_norm (the claim this defense accounts with);
        ``bound`` returns clip_norm, the sensitivity the paper's accounting implies (App. C).
        """
        cfg = self.config
        model, _, _ = self.initial_model(data, seed, device, progress)
        encoder = model.encoder
        global_head = None
        if self.aggregate_head:
            g = torch_generator(seed, "fedemb", "global-head")
            global_head = nn.Parameter(((torch.rand(data.info.num_classes, encoder.rep_dim, generator=g) * 2 - 1)
                                        / math.sqrt(encoder.rep_dim)).to(device))
        num_classes = data.info.num_classes

        def fn(batch, randomness: int = 0) -> torch.Tensor:
            xb, yb, client = batch
            groups = [torch.nonzero(client == c).flatten() for c in torch.unique(client).tolist()]
            users = Users(tuple(groups), "batch")
            plan = RoundPlan(tuple(torch.tensor([c]) for c in range(len(groups))))
            gens = {k: torch_generator(int(randomness), "fedemb-quantity", k) for k in ("batches", "heads", "noise")}
            aggregate, _ = self.run_round(encoder, global_head, plan, users, xb.to(device), yb.to(device), num_classes,
                                          cfg.clip_norm, 0.0, gens)
            # noised_mean divides by |S|; the privatised quantity is the sum.
            return torch.cat([u.flatten() for u in aggregate.update.values()]).double() * len(groups)

        params = {"clip_norm": cfg.clip_norm, "implemented_bound": 2 * cfg.clip_norm,
                  "users_per_client": cfg.users_per_client, "local_steps": cfg.local_steps}
        return [PrivatizedQuantity(
            claim_id="fedemb.virtual-client", source=self.source, relation="replace-one", fn=fn,
            bound=lambda p: float(p["clip_norm"]), params=params, norm="l2",
            description="sum over virtual clients of clipped local deltas ("
                        + ("backbone and global head" if self.aggregate_head else "backbone only; local heads are "
                           "never aggregated") + "); neighbours differ in one virtual client's data. The paper's "
                        "accounting implies sensitivity clip_norm; replace-one admits 2 * clip_norm")]


class DPFedEmb(_Federated):
    """Algorithm 1: virtual clients, local heads (never aggregated), backbone-only clipped noisy aggregation."""

    name = "dp-fedemb"
    aggregate_head = False
    Config = FedEmbConfig
    source = SOURCE


class DPFedAvg(_Federated):
    """Algorithm 2 with virtual clients: a global head aggregated and noised together with the backbone."""

    name = "dp-fedavg"
    aggregate_head = True
    Config = FedAvgConfig
    source = SOURCE_FEDAVG
