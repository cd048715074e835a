"""The papers' utility claims, each with the numbers the paper prints and the benchmark cells that test it.

A claim is an ordering (A above B) or a tie (A within ``margin`` of B) of two encoders' accuracies, or a statement
about the ALM's utility loss; each is measured at the benchmark's reduced scale (``suites/benchmark-fashion-mnist
.toml``: Fashion-MNIST, a small CNN trained from scratch, epsilon 1 and 10) by one or more :class:`Comparison` s of
two cells of the committed reference run. A cell is named by its suite label and target epsilon; ``init`` is the
compared cell's own untrained initialisation (DP-GCL Table 1's "Base"). :mod:`privaudit.audit.benchmark.verdict`
turns the reference into a verdict per claim; the printed numbers below are the papers' (percent), typed from the
papers (``/work/shared/papers``), never measured here.
"""

from __future__ import annotations

from dataclasses import dataclass

LINEAR, KNN = "linear_probe_accuracy", "knn_accuracy"
RELATIONS = ("above", "tie")
#: A tie holds when the difference is within this many accuracy points (the papers' ties differ by 0.1).
TIE_MARGIN = 0.01


@dataclass(frozen=True)
class Comparison:
    """Cell ``a`` at ``eps_a`` against cell ``b`` at ``eps_b`` (``b = "init"``: ``a``'s own init) on ``metric``;
    ``paper``: the paper's printed (A, B) in percent, or None where it prints no number (a figure)."""

    a: str
    eps_a: float | None
    b: str
    eps_b: float | None
    metric: str
    paper: tuple[float, float] | None = None


@dataclass(frozen=True)
class UtilityClaim:
    """One claim of a paper about utility, the comparisons that test it and how the reduced scale differs."""

    id: str
    paper: str
    source: str
    statement: str
    relation: str
    comparisons: tuple[Comparison, ...]
    setting: str
    margin: float = TIE_MARGIN
    caveat: str = ""  # what a reader of the verdict must know (a calibration the register refutes, ...)


@dataclass(frozen=True)
class LossClaim:
    """A claim about the ALM head's utility loss (Def. 6.1) across its noise mechanisms, read from the ALM cells'
    privacy-utility curve: ``mechanism`` below ``threshold`` (``other`` None), or its loss against ``other``'s
    (``relation``: ``below``, the loss of ``mechanism`` lower, or ``tie``)."""

    id: str
    paper: str
    source: str
    statement: str
    mechanism: str
    relation: str
    epsilons: tuple[float, ...]
    setting: str
    other: str | None = None
    threshold: float | None = None
    margin: float = TIE_MARGIN
    cell: str = "alm"


def _pairs(a: str, b: str, values: dict[float, tuple[tuple[float, float], tuple[float, float]]],
           eps_b: dict[float, float | None] | None = None) -> tuple[Comparison, ...]:
    """Comparisons of ``a`` and ``b`` at each epsilon of ``values``: {eps: ((linear A, B), (k-NN A, B))}."""
    out = []
    for eps, (linear, knn) in values.items():
        other = (eps_b or {}).get(eps, eps)
        out += [Comparison(a, eps, b, other, LINEAR, linear), Comparison(a, eps, b, other, KNN, knn)]
    return tuple(out)


# DP-GCL Table 1, F-MNIST columns (linear probe, k-NN with k = 3), and Table 13.
DPGCL_T1 = {"dp-gcl": {1.0: (81.5, 82.1), 10.0: (82.9, 82.8)}, "dp-clip": {1.0: (78.3, 80.0), 10.0: (79.8, 81.1)},
            "logit-dp": {1.0: (78.2, 79.6), 10.0: (78.4, 79.7)}, "dpsgd": {1.0: (77.5, 79.4), 10.0: (77.5, 78.8)},
            "base": {1.0: (76.0, 77.4), 10.0: (76.0, 77.4)}}
DPGCL_T13_NONPRIVATE = (92.6, 92.7)
DPGCL_SETTING = ("ResNet-18 from scratch, B = 2,048, T = 1,200, group size 16, Adam 1e-3, C = 1, RDP (Opacus), 55,000 "
                 "F-MNIST training images -> the suite's small CNN from scratch, its B and T, the same for every method "
                 "at an epsilon, noise calibrated by the PLD accountant, all 60,000 training images")


def _vs(a: str, b: str) -> tuple[Comparison, ...]:
    return _pairs(a, "init" if b == "base" else b, {
        eps: tuple(zip(DPGCL_T1[a][eps], DPGCL_T1[b][eps])) for eps in (1.0, 10.0)})


def _dpgcl_claims() -> list[UtilityClaim]:
    out = [UtilityClaim(f"dpgcl-t1-above-{b}", "DP-GCL", "Table 1", f"DP-GCL above {name} on F-MNIST at epsilon 1 "
                        "and 10 (linear probe and 3-NN)", "above", _vs("dp-gcl", b), DPGCL_SETTING)
           for b, name in (("dp-clip", "DP-CLIP (batch clipping)"), ("logit-dp", "Logit-DP"), ("dpsgd", "DP-SGD"),
                           ("base", "the untrained encoder (Base)"))]
    out.append(UtilityClaim(
        "dpgcl-t1-baselines-above-base", "DP-GCL", "Table 1 / Sec. 5.1.1", "Existing DP methods (DP-SGD, Logit-DP, "
        "DP-CLIP) improve over the untrained encoder (Base)", "above",
        _vs("dpsgd", "base") + _vs("logit-dp", "base") + _vs("dp-clip", "base"), DPGCL_SETTING))
    out.append(UtilityClaim(
        "dpgcl-t1-epsilon", "DP-GCL", "Table 1 / Sec. 5.1.1", "DP-GCL's performance improves with the privacy "
        "budget: epsilon 10 above epsilon 1", "above",
        _pairs("dp-gcl", "dp-gcl", {10.0: tuple(zip(DPGCL_T1["dp-gcl"][10.0], DPGCL_T1["dp-gcl"][1.0]))},
               {10.0: 1.0}), DPGCL_SETTING))
    out.append(UtilityClaim(
        "dpgcl-t13-nonprivate", "DP-GCL", "Table 13 / App. C.5", "The non-private encoder stays above DP-GCL at "
        "epsilon 10 (92.6 / 92.7 against 82.9 / 82.8)", "above",
        (Comparison("nonprivate", None, "dp-gcl", 10.0, LINEAR, (DPGCL_T13_NONPRIVATE[0], 82.9)),
         Comparison("nonprivate", None, "dp-gcl", 10.0, KNN, (DPGCL_T13_NONPRIVATE[1], 82.8))), DPGCL_SETTING))
    return out


LOGITDP_SETTING = ("CIFAR-10, epsilon 5, 3-NN accuracy, 20 epochs at batch 10,000 (embedding net) or 2 epochs at "
                   "1,000 (ResNet18) -> F-MNIST at epsilon 1 and 10 with the suite's B and T; Naive-DP is batch "
                   "clipping (the suite's dp-clip)")


def _logitdp_claims() -> list[UtilityClaim]:
    tie = tuple(Comparison("logit-dp-net", eps, "dp-clip-net", eps, KNN, (17.3, 17.4)) for eps in (1.0, 10.0))
    larger = tuple(Comparison("logit-dp", eps, "dp-clip", eps, KNN, (20.2, 16.9)) for eps in (1.0, 10.0))
    return [
        UtilityClaim("logitdp-t3-tie-embedding-net", "Logit-DP", "Tables 1 and 3", "On the generic embedding net "
                     "(3 convolutions, an 8-dimensional embedding, no projection head) Logit-DP and Naive-DP tie: "
                     "accuracy 0.173 and 0.174 (relative 0.819 and 0.827)", "tie", tie, LOGITDP_SETTING),
        UtilityClaim("logitdp-t3-above-naive-larger-net", "Logit-DP", "Tables 1 and 3", "On the larger network "
                     "(ResNet18) Logit-DP is above Naive-DP: accuracy 0.202 against 0.169 (relative 0.730 and 0.599)",
                     "above", larger, LOGITDP_SETTING + "; ResNet18 -> the suite's small CNN")]


FEDEMB_SETTING = ("DigiFace, EMNIST, GLD, iNat, recall at FAR 1e-3 (EMNIST printed: 10.47 against 9.67) -> F-MNIST "
                  "users made from the data (each user holds examples of one class), linear probe and 3-NN on the "
                  "10,000 test images (recall at FAR reported beside), epsilon 1 and 10 at the same noise")


def _fedemb_claims() -> list[UtilityClaim]:
    comparisons = tuple(Comparison("dp-fedemb", eps, "dp-fedavg", eps, metric, (10.47, 9.67))
                        for eps in (1.0, 10.0) for metric in (LINEAR, KNN))
    return [UtilityClaim("fedemb-t2-above-fedavg", "DP-FedEmb", "Table 2", "Under the same privacy budget DP-FedEmb "
                         "is above DP-FedAvg", "above", comparisons, FEDEMB_SETTING)]


DPCL_SETTING = ("CIFAR-10, ResNet-18, epsilon 1000, k-NN with k = 5 (Figs. 1-2, no printed number) -> F-MNIST, the "
                "suite's small CNN at epsilon 1 and 10, 3-NN and linear probe; 'original DP-SGD' -> the suite's dpsgd "
                "(per-term clipping, sensitivity (2B+1)C, where DPCL's has 4BC)")


DPCL_CAVEAT = ("DPCL's noise is calibrated, as the paper does, to its gradient sensitivity 4C, which the sensitivity "
               "register refutes (dpcl.simclr-gradient: the sound bound is 4BC): its epsilon is the paper's, not a "
               "sound bound, so this measures the method as published, not at a true budget")


def _unprinted(a: str, b: str, at: tuple[float, ...] = (1.0, 10.0)) -> tuple[Comparison, ...]:
    """``a`` against ``b`` at each epsilon of ``at``, linear probe and k-NN, with no printed number to set beside."""
    return tuple(Comparison(a, e, b, e, m) for e in at for m in (LINEAR, KNN))


def _dpcl_claims() -> list[UtilityClaim]:
    return [
        UtilityClaim("dpcl-s5-above-dpsgd", "DPCL", "Sec. 5.2, Fig. 2", "DP-SGD with DP-similarity trains SimCLR "
                     "better than original DP-SGD at the same privacy budget", "above",
                     _unprinted("dpcl-simclr", "dpsgd"),
                     DPCL_SETTING, caveat=DPCL_CAVEAT),
        UtilityClaim("dpcl-s5-learns", "DPCL", "Sec. 5.2, Fig. 2", "With DP-similarity the test accuracy increases "
                     "over training: above the untrained start", "above",
                     _unprinted("dpcl-simclr", "init"),
                     DPCL_SETTING, caveat=DPCL_CAVEAT),
        UtilityClaim("dpcl-s5-dpsgd-flat", "DPCL", "Sec. 5.2, Fig. 2", "Original DP-SGD cannot train SimCLR: its test "
                     "accuracy stays where it started", "tie",
                     _unprinted("dpsgd", "init"), DPCL_SETTING)]


ALM_SETTING = ("CIFAR-10/100 and STL-10, a SimCLR encoder pretrained on public data, m = 500 -> F-MNIST, the suite's "
               "untrained CNN frozen (no public data), its head fine-tuned on all 60,000 training images, the "
               "sensitivity sampled as ALM Algorithm 2 does, the loss over the 10,000 test images; the Gaussian "
               "calibrated soundly (the discrete Gaussian's zCDP), not by the formula the paper uses past epsilon 1")


def _alm_claims() -> list[LossClaim]:
    at = (1.0, 10.0)
    return [
        LossClaim("alm-s6-logistic-ties-laplace", "ALM", "Sec. 6.1, Fig. 1", "The ALM's utility loss is about the "
                  "Laplace mechanism's at each privacy budget", "logistic", "tie", at, ALM_SETTING, other="laplace"),
        LossClaim("alm-s6-below-gaussian", "ALM", "Sec. 6.1, Fig. 1", "The Gaussian mechanism's utility loss is "
                  "higher than the ALM's at the same privacy budget", "logistic", "below", at, ALM_SETTING,
                  other="gaussian-zcdp"),
        LossClaim("alm-abstract-loss-below-5pct", "ALM", "Abstract", "The protection keeps the performance loss "
                  "below 5%", "logistic", "below", at, ALM_SETTING, threshold=0.05)]


def utility_claims() -> list[UtilityClaim | LossClaim]:
    """Every registered utility claim, in the order the page lists them."""
    return [*_dpgcl_claims(), *_logitdp_claims(), *_fedemb_claims(), *_dpcl_claims(), *_alm_claims()]
