"""Datasets in torchvision's ImageFolder layout (``DIR/<class>/<image>``), read with Pillow, and audited by
``audit-model`` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from privaudit.audit.cli import main
from privaudit.core.datasets import load_dataset, load_raw, locate, missing_files
from privaudit.core.errors import ConfigError
from privaudit.core.io import atomic_save_tensors

import user_classifier


def write_folder(root, classes=("cat", "dog", "eel"), per_class=4, size=8, mode="L", seed=0):
    """Random images, class c brighter by 60 c; returns {(class, file): pixels} of what was written."""
    rng = np.random.default_rng(seed)
    written = {}
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            shape = (size, size) if mode == "L" else (size, size, 3)
            pixels = np.clip(rng.integers(0, 100, shape) + 60 * c, 0, 255).astype(np.uint8)
            Image.fromarray(pixels, mode=mode).save(root / name / f"{i:03d}.png")
            written[(name, f"{i:03d}.png")] = pixels
    return written


def test_rgb_folder_round_trip_in_torchvision_order(tmp_path):
    written = write_folder(tmp_path, classes=("zebra", "ant"), per_class=3, size=6, mode="RGB")
    (tmp_path / "ant" / "more").mkdir()                      # nested files count (torchvision walks)
    Image.fromarray(np.zeros((6, 6, 3), np.uint8)).save(tmp_path / "ant" / "more" / "x.PNG")
    (tmp_path / "ant" / "notes.txt").write_text("not an image")  # other files are skipped
    (tmp_path / ".ipynb_checkpoints").mkdir()                # hidden folders are not classes
    raw = load_raw("imagefolder", tmp_path)
    assert raw.info.shape == (3, 6, 6) and raw.info.num_classes == 2 and raw.info.augmentation == "rgb"
    assert raw.labels.tolist() == [0, 0, 0, 0, 1, 1, 1]       # "ant" = 0, "zebra" = 1 (sorted names)
    assert np.array_equal(raw.images[0], written[("ant", "000.png")].transpose(2, 0, 1))
    assert np.array_equal(raw.images[4], written[("zebra", "000.png")].transpose(2, 0, 1))
    assert not np.any(raw.images[3])                          # ant/more/x.PNG, sorted after ant/002.png
    assert not raw.is_test.any() and raw.images.dtype == np.uint8


def test_grey_folder_splits_for_membership(tmp_path):
    write_folder(tmp_path, per_class=40)
    data = load_dataset("imagefolder", seed=3, data_dir=tmp_path)
    assert data.info.shape == (1, 8, 8) and data.info.augmentation == "grey"
    n = len(data.public) + len(data.shadow) + len(data.pool) + len(data.test)
    assert n == 120 and 0 < len(data.train) < len(data.pool)
    assert locate("imagefolder", tmp_path) == tmp_path and missing_files("imagefolder", tmp_path) == []


@pytest.mark.parametrize("build, message", [
    (lambda d: None, "needs a data directory"),
    (lambda d: (d / "only").mkdir(), "is not an ImageFolder"),
    (lambda d: (write_folder(d, classes=("a",)), (d / "b").mkdir()), "class folder without images"),
    (lambda d: (write_folder(d), Image.fromarray(np.zeros((8, 9), np.uint8)).save(d / "dog" / "wide.png")),
     "wide.png: 9x8 pixels; every image must be square"),
    (lambda d: (write_folder(d), (d / "dog" / "bad.jpg").write_bytes(b"not a jpeg")), "bad.jpg: not a readable image"),
])
def test_bad_folders_are_one_clear_error(tmp_path, build, message):
    root = tmp_path / "imgs"
    root.mkdir()
    build(root)
    with pytest.raises(ConfigError, match=message):
        load_raw("imagefolder", None if message == "needs a data directory" else root)


def test_audit_model_on_image_folders_end_to_end(tmp_path, capsys):
    """A user's 3-class model trained on their own members folder, audited against their non-members folder (RMIA
    with a population folder)."""
    from privaudit.core.datasets.user_files import read_examples

    torch.set_num_threads(1)
    for name, seed in (("members", 1), ("nonmembers", 2), ("population", 3)):
        write_folder(tmp_path / name, per_class=30, seed=seed)
    members = read_examples(tmp_path / "members", "--members")
    torch.manual_seed(0)
    net = user_classifier.make_small_net()
    user_classifier.train(net, torch.from_numpy(members.x), torch.from_numpy(members.y), seed=0)
    atomic_save_tensors(tmp_path / "net.safetensors", net.state_dict())
    code = main(["audit-model", "--factory", "user_classifier:make_small_net", "--weights",
                 str(tmp_path / "net.safetensors"), "--members", str(tmp_path / "members"), "--nonmembers",
                 str(tmp_path / "nonmembers"), "--population", str(tmp_path / "population"),
                 "--train-fn", "user_classifier:train", "--attacks", "loss,rmia", "--reference-models", "4",
                 "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)["attacks"]
    assert set(out) == {"loss", "rmia"}
    for s in out.values():
        assert s["n_members"] == 90 and s["n_nonmembers"] == 90
        assert 0.5 < s["auc"] <= 1.0, s["auc"]  # 150 Adam steps on 90 random images memorise them
