"""The register of sensitivity claims: one entry per theorem or stated bound.

Each entry (a :class:`~privaudit.audit.sensitivity.claim_spec.ClaimSpec`) names its source (paper and
theorem/equation), the neighbouring relation, the norm, the claimed bound **as the paper states it** (the
functions below, each pinned by tests to the paper's statement), the parameters it reads, the notes that
reach every report, and the *settings* the search tries: small, extreme configurations (tiny batches,
temperatures, group sizes) as defense hyper-parameter overrides plus the batch size in units. The bound is
evaluated at each setting's realised parameters. How an entry becomes a search target is
:mod:`privaudit.audit.sensitivity.builders`; the defenses' code it checks, their ``privatized_quantities``.

Reference entries (``reference.*``) are functions with known sensitivity used to calibrate the
samplers; they are not paper claims and are left out of "all claims".
"""

from __future__ import annotations

import math
from typing import Any

from privaudit.core.errors import ConfigError
from privaudit.audit.sensitivity.builders import (alm_builder, fedemb_builder, group_params, image_builder,
                                                  logit_params, params_with, reference_builder)
from privaudit.audit.sensitivity.claim_spec import MODEL_STATES, NOISE_MULTIPLIER, ClaimSpec, Params, Setting
from privaudit.audit.sensitivity.context import TRAINED_EPOCHS, Context

__all__ = ["CLAIMS", "MODEL_STATES", "NOISE_MULTIPLIER", "PAPER_CLAIMS", "TRAINED_EPOCHS", "ClaimSpec", "Context",
           "Setting", "select"]


# -- the papers' bounds (each pinned by tests to the paper's statement) --------------------------------
def dpcl_similarity_bound(p: Params) -> float:
    """DPCL Thm. 1: Delta_S <= 4 sqrt(|Z| - 1), |Z| = 2|B| L2-normalised views."""
    return 4.0 * math.sqrt(2 * int(p["B"]) - 1)


def dpcl_mean_bound(p: Params) -> float:
    """DPCL Thm. 2: Delta_mu <= 2 / N for N L2-normalised representations (N = |B|, one view)."""
    return 2.0 / int(p["B"])


def dpcl_sse_bound(p: Params) -> float:
    """DPCL Thm. 3: Delta_SSE <= 6 (the L2 norm of the per-feature SSE vector)."""
    return 6.0


def dpcl_gradient_bound(p: Params) -> float:
    """DPCL Sec. 3.2.2 (and 3.3.2): with the noised similarity (mean, variance), Delta'_g <= 4C."""
    return 4.0 * float(p["C"])


def dpcl_gradient_plain_bound(p: Params) -> float:
    """DPCL Sec. 3.2.1 (and 3.3.1): Delta_g <= 2 n C = 4|B|C for n = 2|B| per-view gradients."""
    return 4.0 * int(p["B"]) * float(p["C"])


def dpgcl_sample_level_bound(p: Params) -> float:
    """DP-GCL Sec. 2.3.1 (Eq. 6): (2B + 1) C for a batch of B pairs, one clipped term per pair.

    ``t`` is the number of clipped loss terms per example in the implementation (Eq. 6 has t = 1);
    the argument scales with it: (2B + 1) t C.
    """
    return (2 * int(p["B"]) + 1) * int(p.get("t", 1)) * float(p["C"])


def dpgcl_batch_level_bound(p: Params) -> float:
    """DP-GCL Eq. 7 (batch-level clipping, DP-CLIP): 2C."""
    return 2.0 * float(p["C"])


def dpgcl_group_clip_bound(p: Params) -> float:
    """DP-GCL Thm. 1 (Eq. 8): (2K + 1) C with K = ceil(B / S) groups of the batch D (|D| = B)."""
    return (2 * math.ceil(int(p["B"]) / int(p["S"])) + 1) * float(p["C"])


def dpgcl_group_bound(p: Params) -> float:
    """DP-GCL Thms. 2-3 (Eqs. 10, 13): 2C, independent of B and S."""
    return 2.0 * float(p["C"])


def logitdp_infonce_bound(p: Params) -> float:
    """Logit-DP Lemma 4.5 with Thm. 4.2 / Cor. 4.3: 2 (1 + (n - 2) e^2 / (e^2 + n - 1)) B_pair.

    n is the larger neighbour's batch size (the lemma compares n with n - 1 pairs). The lemma is
    stated for cosine logits in [-1, 1] (tau = 1); for logits s / tau the register reads e^2 as
    e^{2/tau} (the logit range [-1/tau, 1/tau]), which is what the implementation calibrates with.
    """
    a = math.exp(2.0 / float(p.get("tau", 1.0)))
    n = int(p["n"])
    return 2.0 * (1.0 + (n - 2) * a / (a + n - 1)) * float(p["C"])


def logitdp_spreadout_bound(p: Params) -> float:
    """Logit-DP Lemma 4.6: G1 + G2 + (n - 1) L <= 6, so 6 B_pair for every n."""
    return 6.0 * float(p["C"])


def fedemb_bound(p: Params) -> float:
    """DP-FedEmb App. C: noise proportional to the clip norm gamma -- the accounting implies Delta = gamma."""
    return float(p["clip_norm"])


def alm_bound(p: Params) -> float:
    """ALM Algorithm 2: the L1 sensitivity *sampled* on the fine-tuning set, used as if global."""
    return float(p["sensitivity_l1"])


# -- the register ------------------------------------------------------------------------------------
S = Setting


def T(units: int, **overrides: Any) -> Setting:
    """A setting at the briefly trained model."""
    return Setting(units, overrides, "trained")


def A(units: int, **overrides: Any) -> Setting:
    """A setting at the constructed antipodal parameter value (see :class:`Setting`)."""
    return Setting(units, overrides, "antipodal")


_GROUPS = (T(8, group_size=2, batch_size=8), T(4, group_size=2, batch_size=4), S(6, {"group_size": 3, "batch_size": 6}))
GROWTH_BATCHES = (2, 4, 8, 16, 32)  # |B| of the growth tables
GROWTH_TEMPERATURES = (0.1, 0.5, 1.0)
# SATURATED_CLIP: a clip norm far below the gradients' scale, so every unit is clipped ("all
# clipped"): each clipped unit is C times a unit vector and observed / C is scale-free. There the
# changed example turning every unit's direction shows as a ratio growing with |B| (Barlow Twins:
# the batch statistics couple all units; chunked grouping: every later group shifts). SimCLR keeps
# the default clip: the constructed parameters (extremal.flip_seeds) saturate it themselves.
# SIMCLR_NOISE: the noise multiplier of the similarity matrix released before the gradient (the
# claim holds, or not, at every multiplier; a small one is a large epsilon). At the default 1 the
# noise (std 4 sqrt(2|B| - 1) x 1.4, ~45 at |B| = 32) swamps the logits, every softmax row is
# one-hot on its largest noise entry, and one example reaches only the rows it wins; at 0.01 every
# view sees every other, the regime of the sound 4|B|C.
SATURATED_CLIP = 1e-5
SIMCLR_NOISE = 0.01
_GROWTH = tuple(T(b, noise_multiplier=SIMCLR_NOISE) for b in GROWTH_BATCHES)
_SATURATED_GROWTH = tuple(T(b, clip=SATURATED_CLIP) for b in GROWTH_BATCHES)
_CHUNK_GROWTH = tuple(T(b, group_size=2, batch_size=b, clip=SATURATED_CLIP) for b in GROWTH_BATCHES)
_LOGIT_GROWTH = tuple(T(1, temperature=t) for t in GROWTH_TEMPERATURES)

_ENTRIES: list[ClaimSpec] = [
    # reference functions (calibration of the samplers)
    ClaimSpec("reference.clipped-sum.add-remove", "reference: sum of rows clipped to C", "add-remove", "l2",
              "C", lambda p: float(p["C"]), ("C",), reference_builder, (S(3), S(8)), reference=True, budget_seconds=4),
    ClaimSpec("reference.clipped-sum.replace-one", "reference: sum of rows clipped to C", "replace-one", "l2",
              "2C", lambda p: 2.0 * float(p["C"]), ("C",), reference_builder, (S(3), S(8)), reference=True,
              budget_seconds=4),
    ClaimSpec("reference.unit-mean", "reference: mean of N unit vectors", "replace-one", "l2",
              "2/N", lambda p: 2.0 / int(p["N"]), ("N",), reference_builder, (S(3), S(8)), reference=True,
              budget_seconds=4),
    ClaimSpec("reference.buggy-clip", "reference: clipped sum whose clip norm forgets one term", "add-remove", "l2",
              "C (claimed; the true sensitivity is unbounded)", lambda p: float(p["C"]), ("C",), reference_builder,
              (S(3), S(8)), reference=True, budget_seconds=4),
    # DPCL (Li et al.), replace-one, fixed-size batches
    ClaimSpec("dpcl.similarity-matrix", "DPCL Thm. 1 (Sec. 3.2.2)", "replace-one", "l2", "4 sqrt(2B - 1)",
              dpcl_similarity_bound, ("B",), image_builder(params_with()), (A(2), T(4), A(8)), defense="dpcl-simclr"),
    ClaimSpec("dpcl.mean", "DPCL Thm. 2 (Sec. 3.3.2)", "replace-one", "l2", "2 / B", dpcl_mean_bound, ("B",),
              image_builder(params_with()), (A(2), T(4), A(8)), defense="dpcl-barlow"),
    ClaimSpec("dpcl.sse", "DPCL Thm. 3 (Sec. 3.3.2)", "replace-one", "l2", "6", dpcl_sse_bound, (),
              image_builder(params_with()), (A(8), T(4), A(2)), defense="dpcl-barlow",
              notes=("the L2 norm of the vector of per-feature SSEs; for unit rows its supremum is 4 (1 - 1/B) "
                     "(one row e1 replaced by -e1 among copies of e1), so 6 holds, loosely, in this reading",)),
    ClaimSpec("dpcl.simclr-gradient", "DPCL Sec. 3.2.2", "replace-one", "l2", "4C", dpcl_gradient_bound, ("C",),
              image_builder(params_with("C")), _GROWTH, defense="dpcl-simclr",
              base_overrides={"clip_unit": "view"}, growth=("B",), budget_seconds=16),
    ClaimSpec("dpcl.simclr-gradient-plain", "DPCL Sec. 3.2.1", "replace-one", "l2", "4 B C",
              dpcl_gradient_plain_bound, ("B", "C"), image_builder(params_with("C", "tau"), seeds="plain_simclr_seeds"),
              (T(2), T(4), T(3, temperature=0.1), S(4)), defense="dpcl-simclr", base_overrides={"clip_unit": "view"},
              notes=("tight: the supremum is the bound 4|B|C (approached, not attained). The split-flip "
                     "construction (extremal.split_flip_seeds) turns every view's clipped gradient around, the "
                     "replaced example's two included (its views split across the circle in D, together in D'); "
                     "its ratio tends to 1 as its angles approach the ends of the half circle. At small "
                     "temperatures the rows across the circle see each other only through e^(-2/tau), torques "
                     "that float32 rounds away, so the model realises less of the turn than exact arithmetic",)),
    ClaimSpec("dpcl.barlow-gradient", "DPCL Sec. 3.3.2", "replace-one", "l2", "4C", dpcl_gradient_bound, ("C",),
              image_builder(params_with("C")), _SATURATED_GROWTH, defense="dpcl-barlow",
              base_overrides={"clip_unit": "view"}, growth=("B",), budget_seconds=16),
    # DP-GCL (add/remove)
    ClaimSpec("dpgcl.sample-level", "DP-GCL Sec. 2.3.1 (Eq. 6)", "add-remove", "l2", "(2B + 1) t C (t = 1 in Eq. 6)",
              dpgcl_sample_level_bound, ("B", "C", "t"), image_builder(params_with("C", "t")), (T(1), T(2), S(4)),
              defense="dpsgd",
              notes=("at |B| = 1 the bound is loose: D's t terms are softmaxes over one candidate, constant, so their "
                     "gradients are 0 and Delta <= 2 t C, 2/3 of (2|B| + 1) t C (the supremum at |B| = 1: the t new "
                     "terms and the t old ones, each clipped to C); at |B| = 2, 4 the search starts from the "
                     "add-flip construction (extremal.add_flip_seeds)",)),
    ClaimSpec("dpgcl.batch-level", "DP-GCL Eq. 7 (Sec. 2.3.2)", "add-remove", "l2", "2C", dpgcl_batch_level_bound,
              ("C",), image_builder(params_with("C")), (T(1), T(2), S(4)), defense="dp-clip"),
    ClaimSpec("dpgcl.group-clip", "DP-GCL Thm. 1 (Eq. 8)", "add-remove", "l2", "(2 ceil(B/S) + 1) C",
              dpgcl_group_clip_bound, ("B", "S", "C"), image_builder(group_params, seeds="group_clip_pairs"), _GROUPS,
              defense="dp-gcl",
              notes=("the implementation's K groups are fixed (random grouping), so the added example joins one of "
                     "them and no group appears: Delta <= 2KC, the closed-form supremum (2K / (2K + 1) of "
                     "(2K + 1) C: 8/9 at K = 4, 4/5 at K = 2), reached in the limit by extremal.group_clip_seeds "
                     "(every group's clipped gradient turned around, the added example's group included); Thm. 1's "
                     "extra C is a group that cannot appear",)),
    ClaimSpec("dpgcl.group", "DP-GCL Thms. 2-3 (Eqs. 10, 13; App. A)", "add-remove", "l2", "2C", dpgcl_group_bound,
              ("C",), image_builder(group_params), _GROUPS, defense="dp-gcl", variant="random"),
    ClaimSpec("dpgcl.group", "DP-GCL Thms. 2-3 (Eqs. 10, 13; App. A)", "add-remove", "l2", "2C", dpgcl_group_bound,
              ("C",), image_builder(group_params), _CHUNK_GROWTH, defense="dp-gcl", variant="chunk", growth=("B",),
              budget_seconds=16),
    # Logit-DP (add/remove)
    ClaimSpec("logitdp.infonce", "Logit-DP Lemma 4.5 (Thm. 4.2, Cor. 4.3)", "add-remove", "l2",
              "2 (1 + (n - 2) e^(2/tau) / (e^(2/tau) + n - 1)) C, n = B + 1", logitdp_infonce_bound,
              ("n", "C", "tau"), image_builder(logit_params),
              _LOGIT_GROWTH, defense="logit-dp", budget_seconds=30, growth=("tau",),
              notes=("n = 2 (one pair added to one) is where the proof's shared p_n hurts most: the new row's "
                     "diagonal probability and the new column's probability in the old row are different "
                     "entries and can be small and large together",)),
    ClaimSpec("logitdp.spreadout", "Logit-DP Lemma 4.6", "add-remove", "l2", "6C", logitdp_spreadout_bound, ("C",),
              image_builder(logit_params, seeds="spreadout_pairs"), (T(1), T(2), S(4)), defense="logit-dp",
              notes=("at n = 2 the bound is loose, its supremum is 4C (2/3 of 6C): D (one example) is below the "
                     "spreadout loss's minimum batch and releases 0, and the two new terms carry |dL/dZ_ij| = "
                     "2 |Z_ij| / (n - 1) <= 2, so Delta <= 4C, approached by extremal.spreadout_seeds (both logits "
                     "near -1, their clipped gradients parallel: 4 cos(0.04) C = 0.999 of 4C); at n >= 3 the old "
                     "terms' renormalisation adds up to 2C (Lemma 4.6's (n - 1) L) and no closed form is derived. "
                     "Each pair norm is computed in float64 with a rounding bound that keeps it above the true one "
                     "(defenses/dp/engine/pairs.py), so cancellation in the Gram identity (|A|^2 + |B|^2 + 2 <A, B>) "
                     "cannot let a clipped pair term exceed C",)),
    # DP-FedEmb (user level, replace-one)
    ClaimSpec("fedemb.virtual-client", "DP-FedEmb Alg. 1, App. C (user-level clipping)", "replace-one", "l2",
              "clip_norm (what the paper's accounting implies)", fedemb_bound, ("clip_norm",), fedemb_builder,
              (S(2, {"users_per_client": 1, "examples_per_user": 4}),
               S(4, {"users_per_client": 2, "examples_per_user": 2})), defense="dp-fedemb",
              base_overrides={"pretrain": False}, budget_seconds=20,
              notes=("replace-one of one user moves one virtual client's clipped delta anywhere in the "
                     "clip_norm ball: up to 2 clip_norm, which the defense's claim accounts with "
                     "(params.implemented_bound)",)),
    # ALM (sampled, no closed form)
    ClaimSpec("alm.head-weights", "ALM Algorithm 2 (sensitivity sampler), Prop. 4.1", "replace-one", "l1",
              "the L1 sensitivity sampled by Algorithm 2 on the members (m remove-one pairs)", alm_bound,
              ("sensitivity_l1",), alm_builder, (S(0),), defense="alm",
              base_overrides={"epochs": 2, "sensitivity_m": 100}, closed_form=False, black_box=True,
              budget_seconds=25,
              notes=("Algorithm 2 samples pairs (d minus d_i, d minus d_j) inside the fine-tuning set: a local "
                     "sensitivity at d; the check replaces one member by any labelled image",)),
]

CLAIMS: dict[str, ClaimSpec] = {c.id: c for c in _ENTRIES}
PAPER_CLAIMS: tuple[str, ...] = tuple(c.id for c in _ENTRIES if not c.reference)


def select(claim_ids: list[str] | None, *, include_reference: bool = False) -> list[ClaimSpec]:
    """Register entries for ``claim_ids`` (None: every paper claim). A bare key selects all its variants."""
    if claim_ids is None:
        return [c for c in _ENTRIES if include_reference or not c.reference]
    out: list[ClaimSpec] = []
    for cid in claim_ids:
        hits = [c for c in _ENTRIES if c.id == cid] or [c for c in _ENTRIES if c.key == cid]
        if not hits:
            raise ConfigError(f"claim: unknown claim {cid!r}; accepted: {', '.join(CLAIMS)}")
        out.extend(h for h in hits if h not in out)
    return out
