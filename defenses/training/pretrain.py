"""Where a DP encoder starts: public pretraining (the papers' recipe), a random initialisation, or a file.

All five papers start their private training from an encoder trained without privacy on public data:
DPCL (Sec. 5.1), DP-GCL (Sec. 4.1) and Logit-DP (Sec. 5) fine-tune a pretrained encoder, and the ALM
(Algorithm 1) and DP-FedEmb (Sec. 2.3) pretrain on public data themselves. ``init``:

* ``"public"`` (default) -- SimCLR on the dataset's public split (``data.public``, disjoint from the
  audit pool, the shadow pool and the test set: :mod:`privaudit.core.datasets.splits`), trained by the same
  routine the ALM and DP-FedEmb use (:func:`privaudit.defenses.nonprivate.train_contrastive`). It uses no
  private data, so it costs no privacy and the claim is unchanged; membership is audited on the
  private pool only.
* ``"random"`` -- the seeded random initialisation.
* a path -- a ``.safetensors`` file: ``model.safetensors`` written by ``Trained.save`` (``model.``
  prefixed keys) or a bare state dict of the same architecture.

The pretrained encoder depends only on the dataset, its split seed (``data.seed``: shadow and
reference models of one cell share it) and the pretraining configuration, so it is cached: in this
process, and on disk in ``$PRIVAUDIT_CACHE_DIR/pretrained/`` (the runner points that inside the run's
output directory), as safetensors. Every cell of a suite on one dataset and seed shares it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.nn as nn

from privaudit.core.datasets import MembershipData
from privaudit.core.errors import ConfigError
from privaudit.core.io import atomic_save_tensors, load_tensors
from privaudit.defenses.training.training import ContrastiveConfig

INITS = ("public", "random")
CACHE_ENV = "PRIVAUDIT_CACHE_DIR"

# Pretraining on the public split: SimCLR, Adam 1e-3, batches of 128 (the non-private baseline's recipe).
PRETRAIN_LOSS = "simclr"
PRETRAIN_BATCH = 128
PRETRAIN_LR = 1e-3

_MEMORY: dict[str, dict[str, torch.Tensor]] = {}


def check_init(init: str) -> None:
    """Validate an ``init`` value: ``public``, ``random`` or the path of an existing safetensors file."""
    if not isinstance(init, str) or not init:
        raise ConfigError(f"init: expected 'public', 'random' or a .safetensors path, got {init!r}")
    if init in INITS:
        return
    path = Path(init).expanduser()
    if not path.is_file():
        raise ConfigError(f"init: {init!r} is neither 'public' nor 'random' nor an existing .safetensors file")


def pretrain_config(cfg: ContrastiveConfig, epochs: int) -> ContrastiveConfig:
    """The public pretraining configuration for a defense's architecture ``cfg``."""
    return ContrastiveConfig(encoder=cfg.encoder, width=cfg.width, rep_dim=cfg.rep_dim, pool=cfg.pool,
                             proj_hidden=cfg.proj_hidden,
                             proj_dim=cfg.proj_dim, loss=PRETRAIN_LOSS, temperature=0.5, epochs=epochs,
                             batch_size=PRETRAIN_BATCH, lr=PRETRAIN_LR, optimizer="adam",
                             augmentation=cfg.augmentation)


def _key(data: MembershipData, pcfg: ContrastiveConfig) -> str:
    rows = hashlib.sha256(data.public.index.numpy().tobytes()).hexdigest()[:16]
    blob = json.dumps({"dataset": data.info.name, "seed": data.seed, "public_rows": rows,
                       "n_public": len(data.public), "config": asdict(pcfg)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cache_dir() -> Path | None:
    value = os.environ.get(CACHE_ENV)
    return Path(value) / "pretrained" if value else None


@contextlib.contextmanager
def cache_in(directory: str | os.PathLike[str]) -> Iterator[None]:
    """Cache pretrained encoders on disk under ``directory/pretrained`` (also in spawned workers)."""
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(directory)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = old


def public_state(data: MembershipData, cfg: ContrastiveConfig, epochs: int, *, device: str | torch.device = "cpu",
                 progress: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The state dict of the encoder pretrained on ``data.public`` (cached), and how it was made."""
    from privaudit.defenses.nonprivate import train_contrastive

    if len(data.public) < 2:
        raise ConfigError(f"init: 'public' needs a public split, and dataset {data.info.name!r} has "
                          f"{len(data.public)} public examples (splits.public = {data.config.public}); "
                          "use init = 'random' or a .safetensors path")
    pcfg = pretrain_config(cfg, epochs)
    key = _key(data, pcfg)
    record = {"init": "public", "key": key, "n_public": len(data.public), "data_seed": data.seed,
              "recipe": f"SimCLR on the public split: {epochs} epochs, batch {PRETRAIN_BATCH}, Adam lr {PRETRAIN_LR}",
              "cached": "memory"}
    if key in _MEMORY:
        return _MEMORY[key], record
    disk = cache_dir()
    path = disk / f"{key}.safetensors" if disk else None
    if path is not None and path.is_file():
        state = load_tensors(path)
        record["cached"] = "disk"
    else:
        start = time.perf_counter()
        batch = min(PRETRAIN_BATCH, len(data.public))
        model, _, _ = train_contrastive(data.public.x, data.info, replace(pcfg, batch_size=batch), data.seed,
                                        device=device, progress=progress, desc="public pretraining")
        state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        record["cached"] = None
        record["seconds"] = time.perf_counter() - start
        if path is not None:
            atomic_save_tensors(path, state)
    _MEMORY[key] = state
    return state, record


def file_state(init: str) -> dict[str, torch.Tensor]:
    """A state dict from a safetensors file (``model.`` prefixed keys of ``Trained.save`` or bare)."""
    path = Path(init).expanduser()
    if not path.is_file():
        raise ConfigError(f"init: no such file {init!r}")
    try:
        tensors = load_tensors(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is bad input
        raise ConfigError(f"init: {init!r} is not a readable safetensors file ({type(exc).__name__})") from None
    prefixed = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    return prefixed or tensors


def load_into(model: nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """Copy ``state`` into ``model`` (each tower of a two-tower model); a mismatch names ``init``."""
    towers = list(model.towers) if hasattr(model, "towers") else [model]
    for tower in towers:
        try:
            tower.load_state_dict({k: v.to(next(tower.parameters()).device) for k, v in state.items()})
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()
            raise ConfigError(f"init: {what} does not fit the encoder ({first[1].strip() if len(first) > 1 else first[0]})") from None


def initial_state(init: str, data: MembershipData, cfg: ContrastiveConfig, epochs: int, *,
                  device: str | torch.device = "cpu", progress: bool = False
                  ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:
    """The starting weights for ``init`` (None: keep the random initialisation) and a record of them."""
    check_init(init)
    if init == "random":
        return None, {"init": "random"}
    if init == "public":
        return public_state(data, cfg, epochs, device=device, progress=progress)
    return file_state(init), {"init": str(init)}

