"""Evaluation metrics against scikit-learn and closed forms."""

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier

from privaudit.defenses.evaluation.evaluation import knn_accuracy, knn_predict, linear_probe_accuracy, recall_at_far, \
    retrieval_topk_accuracy


def test_knn_matches_sklearn_cosine():
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 10, generator=g) * 2
    y_train = torch.randint(0, 4, (200,), generator=g)
    y_test = torch.randint(0, 4, (80,), generator=g)
    x_train = centers[y_train] + torch.randn(200, 10, generator=g)
    x_test = centers[y_test] + torch.randn(80, 10, generator=g)
    k = 5  # odd k with few classes: ties are rare and resolved the same way in practice
    ours = knn_predict(x_train, y_train, x_test, k=k, num_classes=4)
    ref = KNeighborsClassifier(n_neighbors=k, metric="cosine").fit(x_train.numpy(), y_train.numpy())
    agree = (ours.numpy() == ref.predict(x_test.numpy())).mean()
    assert agree >= 0.97
    assert knn_accuracy(x_train, y_train, x_test, y_test, k=k) == pytest.approx(
        float((ours == y_test).float().mean()))


def test_linear_probe_separable_and_chance():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 5, generator=g)
    y = (x[:, 0] > 0).long()
    x[:, 0] += 0.5 * (2 * y - 1)  # a margin around the separating hyperplane
    assert linear_probe_accuracy(x[:200], y[:200], x[200:], y[200:]) > 0.98
    noise_y = torch.randint(0, 2, (300,), generator=g)
    assert linear_probe_accuracy(x[:200], noise_y[:200], x[200:], noise_y[200:]) < 0.7


def test_retrieval_topk():
    gallery = torch.eye(4)
    gallery_y = torch.tensor([0, 1, 2, 3])
    query = torch.tensor([[1.0, 0.1, 0, 0], [0, 0, 0.2, 1.0]])
    assert retrieval_topk_accuracy(query, torch.tensor([0, 3]), gallery, gallery_y, k=1) == 1.0
    assert retrieval_topk_accuracy(query, torch.tensor([1, 2]), gallery, gallery_y, k=1) == 0.0
    assert retrieval_topk_accuracy(query, torch.tensor([1, 2]), gallery, gallery_y, k=2) == 1.0


def test_recall_at_far_closed_form():
    # 1-D embeddings on a circle: identity 0 near angle 0, identity 1 near angle pi.
    angles = torch.tensor([0.0, 0.1, 0.2, 3.0, 3.1, 3.2])
    emb = torch.stack([torch.cos(angles), torch.sin(angles)], 1)
    ids = torch.tensor([0, 0, 0, 1, 1, 1])
    r = recall_at_far(emb, ids, far=1e-3)
    assert r.n_genuine == 6 and r.n_impostor == 9
    assert r.far_used == pytest.approx(1 / 9)  # only 9 impostor pairs: lowest resolvable FAR
    assert r.recall == 1.0
    # With overlapping identities recall drops below 1.
    ids2 = torch.tensor([0, 1, 0, 1, 0, 1])
    assert recall_at_far(emb, ids2, far=0.01).recall < 1.0


def test_recall_at_far_matches_bruteforce():
    g = torch.Generator().manual_seed(3)
    emb = torch.randn(60, 8, generator=g)
    ids = torch.randint(0, 6, (60,), generator=g)
    emb = emb + 1.5 * torch.randn(6, 8, generator=g)[ids]
    r = recall_at_far(emb, ids, far=0.05)
    z = torch.nn.functional.normalize(emb, dim=1)
    sims, same = [], []
    for i in range(60):
        for j in range(i + 1, 60):
            sims.append(float(z[i] @ z[j]))
            same.append(bool(ids[i] == ids[j]))
    sims, same = np.array(sims), np.array(same)
    accepted = sims > r.threshold
    assert accepted[~same].mean() <= 0.05 + 1e-12
    assert accepted[same].mean() == pytest.approx(r.recall)
