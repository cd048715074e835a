"""Read a user's member / non-member scores from files: ``.npy``, ``.npz``, CSV, or TF-Privacy's layout.

A score is "higher = member". Three kinds of input are turned into scores:

* ``score``: used as given;
* ``loss``: per-example loss, score = -loss (Yeom et al. 2018's loss attack);
* ``logits`` (with ``labels``): LiRA's logit statistic phi = z_y - logsumexp_{j != y} z_j
  (Carlini et al. 2022, Sec. IV-C; :func:`privaudit.attacks.membership.statistics.logit_phi`);
* ``probs`` (with ``labels``): the same statistic from probabilities, log(p_y / (1 - p_y)).

File layouts (``kind="auto"`` infers the kind from the keys / header):

* ``.npy``: a 1-D array of scores (or losses with ``kind="loss"``); a 2-D array is logits and needs
  ``labels``.
* ``.npz``: keys ``scores``, ``loss`` / ``losses``, ``logits`` + ``labels`` or ``probs`` + ``labels``; a single
  unnamed array (``arr_0``) is read as a ``.npy``.
* CSV: one numeric column (an optional header naming it ``score`` or ``loss``), or a header with a ``label``
  column and one column per class (logits).
* TF-Privacy's ``AttackInputData`` saved as one ``.npz`` (:func:`read_tf_privacy`): ``logits_train`` /
  ``logits_test`` + ``labels_train`` / ``labels_test``, or ``probs_*`` + ``labels_*``, or ``loss_train`` /
  ``loss_test``; train = members, test = non-members. Logits are preferred (the strongest statistic), then
  probabilities, then losses.

Files are read by :mod:`privaudit.core.datasets.arrays` (headers checked before loading, BOM-tolerant CSV).
Probabilities must lie in [0, 1], every value must be finite, labels must be integer class indices in range.
Every problem raises :class:`privaudit.core.errors.ConfigError` naming the file and key; nothing is written here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privaudit.core.datasets.arrays import read_csv, read_npy, read_npz
from privaudit.core.datasets.user_files import check_labels
from privaudit.core.errors import ConfigError, one_of

KINDS = ("auto", "score", "loss", "logits", "probs")
SCORE_KEYS = ("scores", "score")
LOSS_KEYS = ("loss", "losses")


@dataclass(frozen=True)
class Scores:
    """One side's scores (higher = member) and how they were obtained."""

    values: np.ndarray
    kind: str
    source: str
    classes: int | None = None  # logits' / probabilities' width (None for scores and losses)


def _finite(name: str, a: np.ndarray) -> np.ndarray:
    """``a`` as float64 (no copy when it already is), refused when empty, not real or not finite."""
    if a.size == 0:
        raise ConfigError(f"{name}: empty array (needs at least one example)")
    if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
        raise ConfigError(f"{name}: expected real numbers, got dtype {a.dtype}")
    a = a.astype(np.float64, copy=False)
    bad = a.size - int(np.count_nonzero(np.isfinite(a)))
    if bad:
        raise ConfigError(f"{name}: {bad} value(s) are NaN or infinite")
    return a


def _probabilities(name: str, p: np.ndarray) -> np.ndarray:
    """log p, after checking every probability lies in [0, 1] (log 0 = -inf is kept: phi handles it)."""
    lo, hi = float(p.min()), float(p.max())
    if lo < 0 or hi > 1:
        raise ConfigError(f"{name}: probabilities must lie in [0, 1], found values from {lo:g} to {hi:g} "
                          "(give --kind score for other scores)")
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(p, np.finfo(np.float64).tiny))


def statistic(kind: str, values: np.ndarray, labels: np.ndarray | None, name: str) -> np.ndarray:
    """Scores (higher = member) from ``values`` of ``kind`` (see the module docstring)."""
    values = _finite(name, np.asarray(values))
    if kind == "score":
        return _one_d(name, values)
    if kind == "loss":
        return -_one_d(name, values)
    if values.ndim != 2 or values.shape[1] < 2:
        raise ConfigError(f"{name}: {kind} must be a 2-D array (examples x classes, >= 2 classes), "
                          f"got shape {values.shape}")
    if labels is None:
        raise ConfigError(f"{name}: {kind} need labels (an .npz key 'labels', a CSV 'label' column, "
                          "or member_labels / nonmember_labels)")
    y = check_labels(name, labels, values.shape[0], values.shape[1])
    if kind == "probs":
        values = _probabilities(name, values)  # log-probabilities are logits up to a per-row constant (phi ignores it)
    import torch

    from privaudit.attacks.membership.statistics import logit_phi

    return logit_phi(torch.as_tensor(values), torch.as_tensor(y)).numpy()


def scores_of(kind: str, values: np.ndarray, labels: np.ndarray | None, name: str, source: str) -> Scores:
    """:class:`Scores` of ``values`` of ``kind`` (:func:`statistic`), with the class count of logits / probs."""
    classes = int(np.shape(values)[1]) if kind in ("logits", "probs") and np.ndim(values) == 2 else None
    return Scores(statistic(kind, values, labels, name), kind, source, classes)


def _one_d(name: str, a: np.ndarray) -> np.ndarray:
    if a.ndim == 2 and 1 in a.shape:
        a = a.ravel()
    if a.ndim != 1:
        raise ConfigError(f"{name}: expected a 1-D array of scores or losses, got shape {a.shape} "
                          "(2-D arrays are logits: give labels)")
    return a


def read_scores(path: str | Path, kind: str = "auto", labels: np.ndarray | None = None) -> Scores:
    """Read one side's scores from ``path`` (``.npy``, ``.npz`` or ``.csv``); see the module docstring."""
    if kind not in KINDS:
        raise one_of("kind", kind, KINDS)
    path = Path(path)
    name = str(path)
    if not path.is_file():
        raise ConfigError(f"{name}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        values = read_npy(path)
        kind = kind if kind != "auto" else ("logits" if values.ndim == 2 and min(values.shape) > 1 else "score")
        return scores_of(kind, values, labels, name, name)
    if suffix == ".npz":
        arrays = read_npz(path)
        if set(arrays) == {"arr_0"}:
            values = arrays["arr_0"]
            kind = kind if kind != "auto" else ("logits" if values.ndim == 2 and min(values.shape) > 1 else "score")
            return scores_of(kind, values, labels, name, name)
        found = {"score": next((k for k in SCORE_KEYS if k in arrays), None),
                 "loss": next((k for k in LOSS_KEYS if k in arrays), None),
                 "logits": "logits" if "logits" in arrays else None,
                 "probs": "probs" if "probs" in arrays else None}
        if kind == "auto":
            kind = next((k for k in ("logits", "probs", "score", "loss") if found[k]), "")
            if not kind:
                raise ConfigError(f"{name}: no key of {', '.join(('scores', 'loss', 'logits', 'probs'))} "
                                  f"(found: {', '.join(sorted(arrays)) or 'none'})")
        key = found[kind]
        if key is None:
            raise ConfigError(f"{name}: kind {kind!r} needs key {kind if kind != 'score' else 'scores'!r} "
                              f"(found: {', '.join(sorted(arrays)) or 'none'})")
        labs = arrays.get("labels", labels)
        return scores_of(kind, arrays[key], labs, f"{name}[{key}]", name)
    if suffix in (".csv", ".txt"):
        header, data = read_csv(path, text_column="label")
        if header is not None and "label" in header:
            j = header.index("label")
            logits = np.delete(data, j, axis=1)
            kind = "logits" if kind == "auto" else kind
            return scores_of(kind, logits, data[:, j], name, name)
        if kind == "auto":
            kind = "loss" if header is not None and header[0] in LOSS_KEYS else "score"
            if data.shape[1] > 1:
                raise ConfigError(f"{name}: {data.shape[1]} columns; give one column of scores or losses, "
                                  "or a 'label' column beside one column per class (logits)")
        values = data if kind in ("logits", "probs") else data[:, 0] if data.shape[1] == 1 else data
        return scores_of(kind, values, labels, name, name)
    raise ConfigError(f"{name}: unknown file type {suffix or '(none)'!r}; accepted: .npy, .npz, .csv")


TF_PRIVACY_KINDS = (("logits", "logits"), ("probs", "probs"), ("loss", "loss"))


def read_tf_privacy(path: str | Path) -> tuple[Scores, Scores]:
    """Members (train) and non-members (test) from one ``.npz`` in TF-Privacy's ``AttackInputData`` layout."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    if path.suffix.lower() != ".npz":
        raise ConfigError(f"{path}: TF-Privacy input must be an .npz with *_train / *_test keys")
    arrays = read_npz(path)
    for kind, stem in TF_PRIVACY_KINDS:
        train, test = f"{stem}_train", f"{stem}_test"
        if train in arrays or test in arrays:
            if train not in arrays or test not in arrays:
                raise ConfigError(f"{path}: key {train if train not in arrays else test!r} missing "
                                  f"(TF-Privacy layout needs both {train} and {test})")
            sides = []
            for key, side in ((train, "train"), (test, "test")):
                labels = arrays.get(f"labels_{side}")
                if kind != "loss" and labels is None:
                    raise ConfigError(f"{path}: key 'labels_{side}' missing ({key} need labels)")
                sides.append(scores_of(kind, arrays[key], labels, f"{path}[{key}]", f"{path}[{key}]"))
            check_same_classes(*sides)
            return sides[0], sides[1]
    raise ConfigError(f"{path}: no TF-Privacy keys (accepted: logits_train/logits_test + labels_train/labels_test, "
                      f"probs_*, loss_train/loss_test; found: {', '.join(sorted(arrays)) or 'none'})")


def check_same_classes(members: Scores, nonmembers: Scores) -> None:
    """Refuse logits / probabilities of different widths on the two sides: one model gives every example the same
    classes, so two widths mean two models (or a misaligned file)."""
    if members.classes is not None and nonmembers.classes is not None and members.classes != nonmembers.classes:
        raise ConfigError(f"{members.source} and {nonmembers.source}: {members.kind} of {members.classes} and "
                          f"{nonmembers.classes} classes; both sides must come from one model with the same classes")
