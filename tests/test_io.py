"""Atomic writes leave the old file or the new one, never a torn one; loading runs no code."""

import json
import os

import numpy as np
import pytest
import torch

from privaudit.core import io


def test_atomic_json_round_trip(tmp_path):
    path = io.atomic_write_json(tmp_path / "a" / "r.json", {"x": np.float32(1.5), "t": torch.tensor([1, 2])})
    assert json.loads(path.read_text()) == {"x": 1.5, "t": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp files left


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    io.atomic_write_text(path, "old")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        io.atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_tensors_and_npz(tmp_path):
    io.atomic_save_tensors(tmp_path / "t.safetensors", {"w": torch.arange(6.0).view(2, 3)})
    assert torch.equal(io.load_tensors(tmp_path / "t.safetensors")["w"], torch.arange(6.0).view(2, 3))
    io.atomic_save_npz(tmp_path / "s.npz", scores=np.arange(4.0), labels=np.array([True, False, True, False]))
    loaded = io.load_npz(tmp_path / "s.npz")
    assert loaded["scores"].tolist() == [0, 1, 2, 3] and loaded["labels"].dtype == bool


def test_atomic_files_get_ordinary_permissions(tmp_path):
    import os
    import stat

    from privaudit.core.io import atomic_write_text

    mask = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "report.md", "x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
