"""Evaluation of a frozen encoder: k-NN and linear-probe accuracy, top-K retrieval, recall at a FAR.

* k-NN (cosine, majority vote with similarity-sum tie-break): DPCL Sec. 5.1 uses k = 5, DP-GCL
  reports k-NN too (k = 3 in some tables); ``k`` is a parameter.
* Linear probe: multinomial logistic regression on standardised frozen features (scikit-learn).
* Top-K retrieval accuracy: a query is correct if one of its K nearest gallery items shares its label.
* Recall at a fixed false-accept rate (DP-FedEmb Sec. 3.2): over all pairs of distinct examples,
  pick the cosine threshold whose false-accept rate on different-identity pairs is at most ``far``,
  and report the fraction of same-identity pairs accepted.
* Paired comparison of two encoders on the same test examples (:func:`paired_change`): the exact
  McNemar test on the discordant examples, so "below its init" is a measured drop, not one test
  example of sampling noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from privaudit.core.errors import check_positive, check_probability


@torch.no_grad()
def embed(fn, x: torch.Tensor, *, batch_size: int = 1024, device: torch.device | str | None = None) -> torch.Tensor:
    """Apply ``fn`` to ``x`` in batches without gradients; returns a CPU float tensor."""
    outs = []
    for start in range(0, x.shape[0], batch_size):
        chunk = x[start:start + batch_size]
        if device is not None:
            chunk = chunk.to(device)
        outs.append(fn(chunk).float().cpu())
    return torch.cat(outs) if outs else torch.empty(0)


def knn_predict(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                k: int = 5, num_classes: int | None = None, batch_size: int = 2048) -> torch.Tensor:
    """Labels predicted by cosine k-NN: majority vote; ties broken by the summed similarity."""
    check_positive("k", k)
    k = min(k, train_feats.shape[0])
    num_classes = int(num_classes or int(train_labels.max()) + 1)
    train = F.normalize(train_feats.float(), dim=1)
    preds = []
    for start in range(0, test_feats.shape[0], batch_size):
        q = F.normalize(test_feats[start:start + batch_size].float(), dim=1)
        sim, idx = (q @ train.T).topk(k, dim=1)
        labels = train_labels[idx]
        votes = torch.zeros(q.shape[0], num_classes).scatter_add_(1, labels, torch.ones_like(sim))
        weights = torch.zeros(q.shape[0], num_classes).scatter_add_(1, labels, sim)
        # Votes dominate; the similarity sum (< k) only breaks ties.
        preds.append((votes * (2 * k + 1) + weights).argmax(dim=1))
    return torch.cat(preds)


def knn_accuracy(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                 test_labels: torch.Tensor, k: int = 5) -> float:
    """Cosine k-NN classification accuracy of ``test`` against the labelled ``train`` features."""
    num_classes = int(max(int(train_labels.max()), int(test_labels.max())) + 1)
    preds = knn_predict(train_feats, train_labels, test_feats, k, num_classes)
    return float((preds == test_labels).float().mean())


def linear_probe_predict(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor, *,
                         c: float = 1.0, max_iter: int = 2000) -> torch.Tensor:
    """Labels predicted by a logistic-regression probe trained on standardised frozen features."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    probe = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=max_iter))
    probe.fit(train_feats.numpy(), train_labels.numpy())
    return torch.as_tensor(probe.predict(test_feats.numpy()))


def linear_probe_accuracy(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                          test_labels: torch.Tensor, *, c: float = 1.0, max_iter: int = 2000) -> float:
    """Accuracy of a logistic-regression probe trained on standardised frozen features."""
    preds = linear_probe_predict(train_feats, train_labels, test_feats, c=c, max_iter=max_iter)
    return float((preds == test_labels).float().mean())


def retrieval_topk_accuracy(query: torch.Tensor, query_labels: torch.Tensor, gallery: torch.Tensor,
                            gallery_labels: torch.Tensor, k: int = 1) -> float:
    """Fraction of queries with a same-label item among their ``k`` most cosine-similar gallery items."""
    check_positive("k", k)
    sim = F.normalize(query.float(), dim=1) @ F.normalize(gallery.float(), dim=1).T
    idx = sim.topk(min(k, gallery.shape[0]), dim=1).indices
    hit = (gallery_labels[idx] == query_labels[:, None]).any(dim=1)
    return float(hit.float().mean())


@dataclass(frozen=True)
class RecallAtFar:
    """Recall (true-accept rate) at the requested false-accept rate, or the lowest one supported."""

    recall: float
    far_requested: float
    far_used: float  # max(requested, 1 / number of impostor pairs)
    threshold: float
    n_genuine: int
    n_impostor: int


def recall_at_far(embeddings: torch.Tensor, identities: torch.Tensor, far: float = 1e-3) -> RecallAtFar:
    """Recall at a fixed FAR over all pairs of distinct examples (DP-FedEmb Sec. 3.2's metric).

    The threshold is the smallest cosine similarity t with (#impostor pairs scoring >= t) / n_impostor
    <= far_used; recall is the fraction of genuine pairs scoring >= t. When there are fewer than
    1/far impostor pairs, the lowest resolvable FAR (one impostor pair) is used and reported.
    """
    check_probability("far", far)
    z = F.normalize(embeddings.float(), dim=1)
    sim = z @ z.T
    iu = torch.triu_indices(z.shape[0], z.shape[0], offset=1)
    scores = sim[iu[0], iu[1]]
    same = identities[iu[0]] == identities[iu[1]]
    genuine, impostor = scores[same], scores[~same]
    if genuine.numel() == 0 or impostor.numel() == 0:
        raise ValueError("recall_at_far needs at least one genuine and one impostor pair")
    far_used = max(far, 1.0 / impostor.numel())
    allowed = int(math.floor(far_used * impostor.numel() + 1e-9))  # impostors allowed above threshold
    sorted_imp = impostor.sort(descending=True).values
    # Accept scores strictly above the (allowed+1)-th highest impostor score.
    threshold = float(sorted_imp[allowed]) if allowed < sorted_imp.numel() else -math.inf
    recall = float((genuine > threshold).float().mean())
    return RecallAtFar(recall, far, far_used, threshold, int(genuine.numel()), int(impostor.numel()))


def encoder_correct(represent, train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                    test_y: torch.Tensor, *, k: int = 5,
                    device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """Per test example, whether k-NN and the linear probe on ``represent``'s features classify it right."""
    train_f = embed(represent, train_x, device=device)
    test_f = embed(represent, test_x, device=device)
    num_classes = int(max(int(train_y.max()), int(test_y.max())) + 1)
    return {
        "knn_accuracy": knn_predict(train_f, train_y, test_f, k, num_classes) == test_y,
        "linear_probe_accuracy": linear_probe_predict(train_f, train_y, test_f) == test_y,
    }


def encoder_utility(represent, train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                    test_y: torch.Tensor, *, k: int = 5, device: torch.device | str | None = None) -> dict[str, float]:
    """k-NN and linear-probe accuracy of the representation function ``represent``."""
    correct = encoder_correct(represent, train_x, train_y, test_x, test_y, k=k, device=device)
    return {m: float(c.float().mean()) for m, c in correct.items()}


def paired_change(correct: torch.Tensor, baseline: torch.Tensor) -> dict[str, float | int]:
    """Exact McNemar test of an encoder against a baseline on the same test examples.

    ``gained`` = examples right only for the encoder, ``lost`` = right only for the baseline. Under H0
    (the encoder is no worse than the baseline) each of the n = gained + lost discordant examples is lost
    with probability at most 1/2, so ``p_drop`` = P(Binomial(n, 1/2) >= lost) is the one-sided p-value of
    a drop (McNemar 1947, exact form); ``p_gain`` = P(Binomial(n, 1/2) >= gained) is the one-sided p-value of
    a gain (H0: no better than the baseline); ``delta`` = (gained - lost) / N is the accuracy change.
    """
    correct, baseline = torch.as_tensor(correct, dtype=torch.bool), torch.as_tensor(baseline, dtype=torch.bool)
    if correct.shape != baseline.shape or correct.ndim != 1 or correct.numel() == 0:
        raise ValueError(f"paired_change needs two equal-length, non-empty 1-D vectors, got shapes "
                         f"{tuple(correct.shape)} and {tuple(baseline.shape)}")
    from scipy import special

    gained, lost = int((correct & ~baseline).sum()), int((~correct & baseline).sum())
    n = gained + lost
    # P(Binomial(n, 1/2) >= k) = bdtrc(k - 1, n, 1/2), the binomial survival function (scipy.stats.binom.sf's ufunc)
    p_drop = float(special.bdtrc(lost - 1, n, 0.5)) if lost else 1.0
    p_gain = float(special.bdtrc(gained - 1, n, 0.5)) if gained else 1.0
    return {"delta": (gained - lost) / correct.numel(), "gained": gained, "lost": lost, "n": int(correct.numel()),
            "p_drop": p_drop, "p_gain": p_gain}


def gap_closed(trained: float, random: float, reference: float) -> float | None:
    """Fraction of the random -> reference accuracy gap closed: (trained - random) / (reference - random).

    1 means as good as the (non-private) reference, 0 no better than a random encoder, < 0 worse.
    None when the reference does not beat the random encoder (the gap is empty: nothing to close).
    """
    gap = reference - random
    if not gap > 1e-9:
        return None
    return (trained - random) / gap
