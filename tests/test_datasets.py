"""Datasets: embedded digits, torchvision on-disk formats written here and read back, and splits."""

import gzip
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

from privaudit.core.datasets import load_dataset, load_raw, make_splits, missing_files, SplitConfig
from privaudit.core.errors import ConfigError


def write_idx(path, array, gz=False):
    codes = {np.uint8: 0x08}
    header = struct.pack(">BBBB", 0, 0, codes[array.dtype.type], array.ndim)
    header += b"".join(struct.pack(">I", d) for d in array.shape)
    data = header + array.tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)


def make_mnist(root, folder="MNIST", n_train=30, n_test=10, gz=False):
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), gz)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8), gz)


def make_cifar10(root, n_per_batch=8):
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"batch_label": name.encode(), b"labels": rng.integers(0, 10, n_per_batch).tolist(),
                 b"data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
                 b"filenames": [b"x.png"] * n_per_batch}
        (d / name).write_bytes(pickle.dumps(batch, protocol=2))
    (d / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"a"] * 10}))


def make_cifar100(root, n=12):
    d = root / "cifar-100-python"
    d.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name in ("train", "test"):
        batch = {b"fine_labels": rng.integers(0, 100, n).tolist(), b"coarse_labels": [0] * n,
                 b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)}
        (d / name).write_bytes(pickle.dumps(batch))


def make_stl10(root, n=6):
    d = root / "stl10_binary"
    d.mkdir(parents=True)
    rng = np.random.default_rng(2)
    for prefix in ("train", "test"):
        rng.integers(0, 256, (n, 3, 96, 96), dtype=np.uint8).tofile(d / f"{prefix}_X.bin")
        rng.integers(1, 11, n, dtype=np.uint8).tofile(d / f"{prefix}_y.bin")


def test_digits_is_embedded_and_split_disjointly(digits):
    parts = [digits.public, digits.shadow, digits.pool, digits.test]
    indices = torch.cat([p.index for p in parts])
    assert len(indices) == 1797 and len(set(indices.tolist())) == 1797
    assert digits.public.x.shape[1:] == (1, 8, 8)
    assert 0.0 <= float(digits.pool.x.min()) and float(digits.pool.x.max()) <= 1.0
    members = int(digits.membership.sum())
    assert abs(members - len(digits.pool) / 2) < 4 * (len(digits.pool) / 4) ** 0.5  # Binomial(n, 1/2)
    assert len(digits.train) + len(digits.holdout) == len(digits.pool)
    assert set(digits.train.index.tolist()).isdisjoint(digits.holdout.index.tolist())


def test_splits_are_seeded():
    a, b, c = (load_dataset("digits", seed=s) for s in (1, 1, 2))
    assert torch.equal(a.pool.index, b.pool.index) and torch.equal(a.membership, b.membership)
    assert not torch.equal(a.pool.index, c.pool.index)


def test_with_membership_redraws_members(digits):
    flipped = digits.with_membership(~digits.membership)
    assert torch.equal(flipped.train.index, digits.holdout.index)
    with pytest.raises(ConfigError, match="membership: expected shape"):
        digits.with_membership(torch.ones(3, dtype=torch.bool))


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_round_trip(tmp_path, gz):
    make_mnist(tmp_path, gz=gz)
    raw = load_raw("mnist", tmp_path)
    assert raw.images.shape == (40, 1, 28, 28) and raw.labels.shape == (40,)
    assert raw.is_test.sum() == 10
    data = make_splits(raw, seed=0, config=SplitConfig(public=0.2, shadow=0.2))
    assert len(data.test) == 10 and len(data.pool) + len(data.public) + len(data.shadow) == 30


def test_fashion_mnist_uses_its_own_folder(tmp_path):
    make_mnist(tmp_path, folder="FashionMNIST")
    assert load_raw("fashion-mnist", tmp_path).images.shape[0] == 40
    with pytest.raises(ConfigError, match="MNIST/raw is missing train-images-idx3-ubyte"):
        load_raw("mnist", tmp_path)


def test_cifar10_batches(tmp_path):
    make_cifar10(tmp_path)
    raw = load_raw("cifar10", tmp_path)
    assert raw.images.shape == (48, 3, 32, 32) and raw.is_test.sum() == 8
    data = make_splits(raw, seed=0, config=SplitConfig(public=0.1, shadow=0.2))
    assert data.pool.x.shape[1:] == (3, 32, 32)


def test_cifar100_and_stl10(tmp_path):
    make_cifar100(tmp_path)
    make_stl10(tmp_path)
    c = load_raw("cifar100", tmp_path)
    assert c.images.shape == (24, 3, 32, 32) and c.labels.max() < 100
    s = load_raw("stl10", tmp_path)
    assert s.images.shape == (12, 3, 96, 96) and s.labels.min() >= 0 and s.labels.max() <= 9


def test_stl10_is_column_major(tmp_path):
    d = tmp_path / "stl10_binary"
    d.mkdir()
    img = np.zeros((1, 3, 96, 96), dtype=np.uint8)
    img[0, 0, 0, 5] = 200  # row 0, column 5 in the intended image
    img.transpose(0, 1, 3, 2).tofile(d / "train_X.bin")  # stored column-major on disk
    np.array([3], dtype=np.uint8).tofile(d / "train_y.bin")
    img.transpose(0, 1, 3, 2).tofile(d / "test_X.bin")
    np.array([1], dtype=np.uint8).tofile(d / "test_y.bin")
    raw = load_raw("stl10", tmp_path)
    assert raw.images[0, 0, 0, 5] == 200 and raw.labels[0] == 2


def test_missing_and_malformed_directories(tmp_path, monkeypatch):
    monkeypatch.delenv("PRIVAUDIT_DATA_DIR", raising=False)
    with pytest.raises(ConfigError, match="needs a data directory: pass --data-dir DIR or set PRIVAUDIT_DATA_DIR"):
        load_raw("cifar10")
    assert missing_files("digits", None) == []
    (tmp_path / "cifar-10-batches-py").mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (tmp_path / "cifar-10-batches-py" / name).write_bytes(b"not a pickle")
    with pytest.raises(ConfigError, match="data_batch_1: not a CIFAR batch file"):
        load_raw("cifar10", tmp_path)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (raw / name).write_bytes(b"\x01\x02\x03\x04garbage")
    with pytest.raises(ConfigError, match="not an IDX file"):
        load_raw("mnist", tmp_path)


def test_environment_variable_sets_the_data_dir(tmp_path, monkeypatch):
    make_cifar100(tmp_path)
    monkeypatch.setenv("PRIVAUDIT_DATA_DIR", str(tmp_path))
    assert load_raw("cifar100").images.shape[0] == 24


def test_cifar_reader_refuses_code_execution(tmp_path):
    """A pickle that would run a command is rejected, not executed."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (subprocess.call, ([sys.executable, "-c", f"open({str(marker)!r}, 'w')"],))

    d = tmp_path / "cifar-100-python"
    d.mkdir()
    (d / "train").write_bytes(pickle.dumps({b"data": Evil()}))
    (d / "test").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(ConfigError, match="is not allowed"):
        load_raw("cifar100", tmp_path)
    assert not marker.exists()


def test_split_config_is_validated():
    with pytest.raises(ConfigError, match="splits.public: must lie in"):
        SplitConfig(public=1.5).validate()
    with pytest.raises(ConfigError, match="leave at least 5%"):
        SplitConfig(public=0.5, shadow=0.4, test=0.1).validate()
    with pytest.raises(ConfigError, match="must be 0.5 or 1, got 0.9"):
        SplitConfig(inclusion_probability=0.9).validate()


def test_inclusion_probability_one_trains_on_the_whole_training_set():
    """No public or shadow part and every pool example a member: the target trains on every non-test example."""
    data = load_dataset("digits", seed=0, splits=SplitConfig(public=0.0, shadow=0.0, inclusion_probability=1.0))
    assert len(data.public) == len(data.shadow) == len(data.holdout) == 0
    assert len(data.train) == len(data.pool) == 1797 - len(data.test)
    assert not set(data.train.index.tolist()) & set(data.test.index.tolist())


# -- Fashion-MNIST: flat IDX layout, Debian's package, the install line ------------------------------------


def write_flat_fashion(directory, n_train=30, n_test=10):
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(directory / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), True)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8), True)


@pytest.fixture
def no_system_fashion(monkeypatch, tmp_path):
    """Fashion-MNIST's auto-detected (Debian) folder pointed at an empty temporary folder."""
    import dataclasses

    from privaudit.core.datasets import DATASETS

    system = tmp_path / "system-fashion-mnist"
    monkeypatch.setitem(DATASETS, "fashion-mnist", dataclasses.replace(DATASETS["fashion-mnist"], system=(str(system),)))
    monkeypatch.delenv("PRIVAUDIT_DATA_DIR", raising=False)
    return system


def test_fashion_mnist_flat_gzipped_idx_in_the_data_dir(tmp_path, no_system_fashion):
    write_flat_fashion(tmp_path / "data")
    raw = load_raw("fashion-mnist", tmp_path / "data")
    assert raw.images.shape == (40, 1, 28, 28) and raw.is_test.sum() == 10 and raw.images.dtype == np.uint8


def test_fashion_mnist_missing_names_the_package_and_the_flag(tmp_path, no_system_fashion):
    with pytest.raises(ConfigError, match=r"apt-get install dataset-fashion-mnist.*--data-dir"):
        load_raw("fashion-mnist")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"is missing train-images-idx3-ubyte.*apt-get install dataset-fashion-mnist"):
        load_raw("fashion-mnist", tmp_path / "empty")
    assert missing_files("fashion-mnist", tmp_path / "empty")


def test_fashion_mnist_auto_detected_where_debian_installs_it(no_system_fashion):
    write_flat_fashion(no_system_fashion)
    assert missing_files("fashion-mnist", None) == []
    raw = load_raw("fashion-mnist")
    assert raw.images.shape == (40, 1, 28, 28)
    data = make_splits(raw, seed=0)
    parts = [data.public, data.shadow, data.pool, data.test]
    rows = torch.cat([p.index for p in parts]).tolist()
    assert len(rows) == len(set(rows)) == 40  # public, shadow, pool and test are disjoint


def test_datasets_command_lists_fashion_mnist_before_and_after(no_system_fashion, capsys):
    from privaudit.audit.cli import main

    assert main(["datasets", "--json"]) == 0
    row = next(r for r in __import__("json").loads(capsys.readouterr().out) if r["name"] == "fashion-mnist")
    assert row["available"] is False and "apt-get install dataset-fashion-mnist" in row["install"]
    write_flat_fashion(no_system_fashion)
    assert main(["datasets"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("fashion-mnist"))
    assert line.split()[1] == "yes"
    assert main(["datasets", "--json"]) == 0
    row = next(r for r in __import__("json").loads(capsys.readouterr().out) if r["name"] == "fashion-mnist")
    assert row["available"] is True and row["location"] == str(no_system_fashion) and row["install"] is None
