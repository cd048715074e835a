"""The user's doors refuse or warn, in one line, on input they would otherwise misread: losses read as scores
(warned, naming --kind), one file or folder as both sides, logits of different widths on the two sides, NaN
weights (naming --weights), a factory that cannot be called with no arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privaudit.audit.cli import main
from privaudit.audit.user.scores.score_audit import audit_scores
from privaudit.audit.user.scores.score_bounds import inverted_warning
from privaudit.core.errors import ConfigError

import user_classifier


def fair_coin_losses(m: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Losses of a fair-coin split: members' lower (the model fits them)."""
    rng = np.random.default_rng(seed)
    inside = rng.random(m) < 0.5
    loss = rng.exponential(1.0, m) * np.where(inside, 0.7, 1.0)
    return loss[inside], loss[~inside]


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_losses_read_as_scores_are_warned_naming_kind(tmp_path, capsys):
    mem, non = fair_coin_losses()
    np.save(tmp_path / "m.npy", mem)
    np.save(tmp_path / "n.npy", non)
    argv = ["audit-scores", "--members", str(tmp_path / "m.npy"), "--nonmembers", str(tmp_path / "n.npy")]
    assert main(argv) == 0
    err = one_line(capsys)
    assert err.startswith("privaudit: warning: --kind score: AUC 0.4") and "give --kind loss" in err, err
    assert main([*argv, "--kind", "loss"]) == 0
    assert capsys.readouterr().err == ""  # read as losses: AUC above 0.5, no warning


def test_the_inverted_warning_needs_a_clear_signal():
    """z below -4 (Mann-Whitney's null sd): an AUC of 0.49 on 1,000 a side is noise, on 10^6 a side it is not."""
    def summary(auc, n):
        return {"auc": auc, "n_members": n, "n_nonmembers": n}
    assert inverted_warning(summary(0.49, 1000), "score") == ()
    assert "give --kind loss" in inverted_warning(summary(0.49, 10 ** 6), "score")[0]
    assert "give --kind score" in inverted_warning(summary(0.3, 1000), "loss")[0]
    mem, non = fair_coin_losses()
    assert audit_scores(mem, non).warnings and not audit_scores(mem, non, kind="loss").warnings


@pytest.mark.parametrize("folder", [False, True])
def test_the_same_file_or_folder_for_both_sides_is_refused(tmp_path, capsys, folder):
    np.save(tmp_path / "s.npy", np.arange(10.0))
    path = str(tmp_path if folder else tmp_path / "s.npy")
    assert main(["audit-scores", "--members", path, "--nonmembers", path]) == 2
    assert "--members and --nonmembers: both are" in one_line(capsys)
    (tmp_path / "link.npy").symlink_to(tmp_path / "s.npy")
    with pytest.raises(ConfigError, match="both are"):
        audit_scores(tmp_path / "s.npy", tmp_path / "link.npy")


def test_the_same_split_for_audit_model_is_refused(tmp_path, capsys):
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 64), np.float32), y=np.zeros(4, np.int64))
    argv = ["audit-model", "--factory", "user_classifier:make_net", "--weights", str(tmp_path / "w.pt"),
            "--members", str(tmp_path / "d.npz"), "--nonmembers", str(tmp_path / "d.npz")]
    assert main(argv) == 2
    assert "--members and --nonmembers: both are" in one_line(capsys)


def test_tf_privacy_logits_of_different_widths_are_refused(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "t.npz", logits_train=rng.normal(size=(500, 4)), labels_train=rng.integers(0, 4, 500),
             logits_test=rng.normal(size=(500, 7)), labels_test=rng.integers(0, 7, 500))
    assert main(["audit-scores", "--tf-privacy", str(tmp_path / "t.npz")]) == 2
    assert "logits of 4 and 7 classes" in one_line(capsys)
    np.savez(tmp_path / "m.npz", logits=rng.normal(size=(50, 3)), labels=rng.integers(0, 3, 50))
    np.savez(tmp_path / "n.npz", logits=rng.normal(size=(50, 5)), labels=rng.integers(0, 5, 50))
    with pytest.raises(ConfigError, match="logits of 3 and 5 classes"):
        audit_scores(tmp_path / "m.npz", tmp_path / "n.npz")


@pytest.fixture()
def split(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("members", "nonmembers"):
        np.savez(tmp_path / f"{name}.npz", x=rng.random((40, 64), dtype=np.float32),
                 y=rng.integers(0, 10, 40))
    return tmp_path


def test_nan_weights_name_the_weights(split, capsys):
    state = user_classifier.make_net().state_dict()
    state["1.weight"][0, 0] = float("nan")
    torch.save(state, split / "nan.pt")
    assert main(["audit-model", "--factory", "user_classifier:make_net", "--weights", str(split / "nan.pt"),
                 "--members", str(split / "members.npz"), "--nonmembers", str(split / "nonmembers.npz")]) == 2
    err = one_line(capsys)
    assert "--weights" in err and "NaN or infinite" in err and "'1.weight'" in err, err


def test_a_factory_that_needs_arguments_is_one_line(split, capsys):
    torch.save(user_classifier.make_net().state_dict(), split / "w.pt")
    assert main(["audit-model", "--factory", "os:system", "--weights", str(split / "w.pt"),
                 "--members", str(split / "members.npz"), "--nonmembers", str(split / "nonmembers.npz")]) == 2
    assert "factory 'os:system': must build the model when called with no arguments" in one_line(capsys)
