"""The ``opacus-dpsgd`` defense and ``examples/opacus_audit.py`` (tiny size)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from privaudit.accountants import all_epsilons
from privaudit.core.datasets import load_dataset
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget, make_defense

ROOT = Path(__file__).resolve().parents[1]


def test_opacus_defense_emits_the_claim_it_implements():
    torch.set_num_threads(1)
    data = load_dataset("digits", seed=0)
    trained = make_defense("opacus-dpsgd", {"epochs": 2}).fit(data, Budget(target_epsilon=4.0), 0)
    ex = trained.extras
    assert ex["steps"] == 2 * round(1 / ex["sample_rate"])
    eps = all_epsilons(trained.claim)
    # Opacus calibrated to 4 with its RDP accountant; privaudit's RDP on the same mechanism agrees, and the
    # tighter PLD / PRV accountants give less
    assert ex["opacus_epsilon"] <= 4.0 + 1e-6
    assert eps["rdp"].epsilon == pytest.approx(ex["opacus_epsilon"], rel=0.02)
    assert eps["pld"].epsilon < eps["rdp"].epsilon and eps["prv"].epsilon < eps["rdp"].epsilon
    assert trained.claim.relation == "add-remove" and trained.claim.unit == "example"
    assert trained.logits(data.test.x[:5]).shape == (5, data.info.num_classes)
    with pytest.raises(ConfigError, match="target-epsilon or --noise-multiplier"):
        make_defense("opacus-dpsgd").fit(data, Budget(), 0)


def test_physical_batches_give_the_same_model():
    """max_physical_batch_size splits each Poisson batch (Opacus' BatchMemoryManager): same steps, same model."""
    torch.set_num_threads(1)
    data = load_dataset("digits", seed=0)
    models = {}
    for physical in (0, 16):
        trained = make_defense("opacus-dpsgd", {"epochs": 1, "max_physical_batch_size": physical}).fit(
            data, Budget(noise_multiplier=1.0), 0)
        models[physical] = trained
    assert models[0].extras["steps"] == models[16].extras["steps"]
    whole, split = (torch.cat([p.detach().reshape(-1) for p in models[k].model.parameters()]) for k in (0, 16))
    assert float((whole - split).abs().max()) < 1e-6


@pytest.mark.slow  # about 24 s of CPU (imports, 5 Opacus trainings); run with -m slow
def test_opacus_example_reports_the_claim_beside_privaudits_epsilons():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPACUS_AUDIT_TINY": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "opacus_audit.py"), "--json"], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    claimed = report["claimed_epsilon"]
    assert 7.0 < claimed <= 8.0 + 1e-6
    assert report["privaudit_epsilon"]["rdp"] == pytest.approx(claimed, rel=0.02)
    assert report["privaudit_epsilon"]["pld"] < claimed
    for name in ("loss", "lira"):
        lb = report["measured"][name]["eps_lower_bound"]
        assert 0 <= lb <= report["privaudit_epsilon"]["pld"]  # a true claim is not contradicted
        assert "one-run" in report["measured"][name]["method"]
