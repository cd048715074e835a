"""Utility beside leakage: what a trained encoder gained over a random one, against a non-private reference.

For one trained model, :func:`utility_panel` measures k-NN and linear-probe accuracy
(:func:`privaudit.defenses.evaluation.evaluation.encoder_utility`: features of the members train the probe, the test
split scores it) of four encoders on the same data:

* ``trained`` -- the released encoder;
* ``init`` -- where its training started (:mod:`privaudit.defenses.training.pretrain`: public pretraining, random, a
file);
* ``random`` -- the seeded random initialisation of the same architecture;
* ``nonprivate`` -- non-private training from the same init with the same budget of steps and the
  same (expected) batch size on the same members (SimCLR-style objective of the defense when it is
  one of :data:`privaudit.defenses.losses.OBJECTIVES`, else SimCLR; Adam, lr 1e-3: the non-private recipe);

and the fraction of the random -> non-private gap the trained model closes,
``gap_closed = (acc_trained - acc_random) / (acc_nonprivate - acc_random)`` (:func:`gap_closed`), and the
trained model against its init on the same test examples (``vs_init``: the exact McNemar test of
:func:`privaudit.defenses.evaluation.evaluation.paired_change`; ``p_drop`` small means a real drop below the init, not a
test example or two of sampling noise). The reference encoders and their scores depend only on the dataset, split seed,
architecture, init and step budget, so they are cached in this process and shared by the cells of a suite.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from privaudit.core.datasets import MembershipData
from privaudit.defenses.evaluation.evaluation import encoder_correct, gap_closed, paired_change
from privaudit.defenses.losses import OBJECTIVES
from privaudit.defenses.nn.model import build_model
from privaudit.defenses.training.pretrain import PRETRAIN_LR, initial_state
from privaudit.defenses.training.training import ContrastiveConfig

METRICS = ("linear_probe_accuracy", "knn_accuracy")
_SCORES: dict[str, dict[str, float]] = {}
_CORRECT: dict[str, dict[str, torch.Tensor]] = {}


def _contrastive_fields(config: dict[str, Any]) -> ContrastiveConfig:
    names = {f.name for f in fields(ContrastiveConfig)}
    return ContrastiveConfig(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items() if k in names})


def _data_key(data: MembershipData) -> str:
    digest = hashlib.sha256(data.train.index.numpy().tobytes() + data.test.index.numpy().tobytes()).hexdigest()
    return f"{data.info.name}:{data.seed}:{digest[:16]}"


def _cached(key: str, fn) -> dict[str, float]:
    """Accuracies of a reference encoder (its per-example correctness kept beside them), computed once."""
    if key not in _SCORES:
        _CORRECT[key] = fn()
        _SCORES[key] = {m: float(c.float().mean()) for m, c in _CORRECT[key].items()}
    return dict(_SCORES[key])


def _pretrained(config: dict[str, Any]) -> str:
    """The init of a model whose config names none: ``public`` when it pretrains (DP-FedEmb's ``pretrain``)."""
    return "public" if config.get("pretrain") else "random"


def pack_correct(correct: torch.Tensor) -> str:
    """A boolean vector as text: its bits packed (numpy's big-endian bit order), base64-encoded."""
    return base64.b64encode(np.packbits(np.asarray(correct, dtype=bool)).tobytes()).decode("ascii")


def unpack_correct(text: str, n: int) -> np.ndarray:
    """The boolean vector of length ``n`` that :func:`pack_correct` wrote."""
    bits = np.unpackbits(np.frombuffer(base64.b64decode(text, validate=True), dtype=np.uint8))
    if len(bits) < n or len(bits) - n >= 8:
        raise ValueError(f"packed correctness holds {len(bits)} bits, not {n} (rounded up to a byte)")
    return bits[:n].astype(bool)


def utility_panel(trained, data: MembershipData, *, k: int = 5, device: str | torch.device = "cpu",
                  nonprivate: bool = True, per_example: bool = False) -> dict[str, Any]:
    """k-NN / linear-probe accuracy of the trained model, its init, a random encoder and a non-private
    reference with the same step budget, and the fraction of the random -> non-private gap closed.

    ``per_example``: also each test example's correctness for the trained encoder and its init
    (``correct``: :func:`pack_correct` of each metric), for paired comparisons between cells."""
    device = torch.device(device)
    x_tr, y_tr, x_te, y_te = data.train.x, data.train.y, data.test.x, data.test.y

    def score(model) -> dict[str, torch.Tensor]:
        model.eval()
        return encoder_correct(model.represent, x_tr, y_tr, x_te, y_te, k=k, device=device)

    spec = trained.spec
    arch = json.dumps({**spec.to_dict(), "normalize": None}, sort_keys=True, default=str)
    base = f"{_data_key(data)}|{arch}|seed={trained.seed}|k={k}"
    trained_correct = score(trained.model)
    out: dict[str, Any] = {"trained": {m: float(c.float().mean()) for m, c in trained_correct.items()}}
    init_key = f"{base}|random"  # a random init is the random encoder
    out["random"] = _cached(init_key, lambda: score(build_model(spec, seed=trained.seed).to(device)))

    config = dict(trained.config)
    init = str((trained.extras.get("init") or {}).get("init", config.get("init", _pretrained(config))))
    cfg = _contrastive_fields(config)
    state = None
    if init == "random":
        out["init"] = dict(out["random"])
    else:
        state, _ = initial_state(init, data, cfg, int(config.get("pretrain_epochs", 30)), device=device)

        def init_score() -> dict[str, torch.Tensor]:
            model = build_model(spec, seed=trained.seed).to(device)
            model.load_state_dict({kk: v.to(device) for kk, v in state.items()})
            return score(model)

        init_key = f"{base}|init={init}"
        out["init"] = _cached(init_key, init_score)
    out["vs_init"] = {m: paired_change(trained_correct[m], _CORRECT[init_key][m]) for m in METRICS}
    if per_example:
        out["correct"] = {"trained": {m: pack_correct(trained_correct[m]) for m in METRICS},
                          "init": {m: pack_correct(_CORRECT[init_key][m]) for m in METRICS}}

    steps = len(trained.history.get("step", []))
    if nonprivate and steps > 0:
        from privaudit.defenses.nonprivate import train_contrastive

        batch = max(2, min(int(config.get("batch_size", 128)), len(x_tr)))
        loss = config.get("loss") if config.get("loss") in OBJECTIVES else "simclr"
        epochs = math.ceil(steps / math.ceil(len(x_tr) / batch))
        ref = ContrastiveConfig(**{**{f.name: getattr(cfg, f.name) for f in fields(ContrastiveConfig)},
                                   "loss": loss, "batch_size": batch, "epochs": epochs, "lr": PRETRAIN_LR,
                                   "optimizer": "adam", "weight_decay": 0.0})

        def reference() -> dict[str, torch.Tensor]:
            model, _, _ = train_contrastive(x_tr, data.info, ref, trained.seed, device=device, progress=False,
                                            desc="non-private reference", init_state=state, max_steps=steps)
            return score(model)

        out["nonprivate"] = _cached(f"{base}|init={init}|np:{loss}:{batch}:{steps}", reference)
        out["reference"] = {"steps": steps, "batch_size": batch, "loss": loss, "optimizer": "adam", "lr": PRETRAIN_LR,
                            "init": init}
        out["gap_closed"] = {m: gap_closed(out["trained"][m], out["random"][m], out["nonprivate"][m]) for m in METRICS}
    return out
