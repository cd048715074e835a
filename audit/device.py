"""Device selection: CUDA when present and asked for, CPU everywhere."""

from __future__ import annotations

import torch

from privaudit.core.errors import ConfigError, one_of

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when available; ``cuda`` without a GPU is an error naming the flag."""
    if name not in DEVICES and not name.startswith("cuda:"):
        raise one_of("device", name, DEVICES)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {name!r} requested but no CUDA device is available; use --device cpu")
    if name.startswith("cuda:"):
        index, count = name.removeprefix("cuda:"), torch.cuda.device_count()
        if not (index.isdigit() and int(index) < count):
            raise ConfigError(f"device: {name!r} does not exist; this machine has cuda:0 to cuda:{count - 1}")
    return torch.device(name)
