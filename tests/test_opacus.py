"""The ``opacus-dpsgd`` defense, and the README's "Audit your own model" flow with ``examples/opacus_audit.py``."""

from __future__ import annotations

import json
import os
import re
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


def readme_flow() -> list[str]:
    """The README's "Audit your own model" commands, in order."""
    section = (ROOT / "README.md").read_text().split("## Audit your own model", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [line for line in block.strip().splitlines() if line.strip()]


def run_flow(tmp: Path, env: dict[str, str], replace: tuple[tuple[str, str], ...] = (), audit_status: int = 0) -> dict:
    """Run the README's commands in ``tmp`` (with this checkout's privaudit and examples) and read the report; each
    exits 0 but the audit, which exits ``audit_status`` (1: the claim is refuted)."""
    (tmp / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    commands = readme_flow()
    for i, command in enumerate(commands):
        command = (command.replace("python ", f"{sys.executable} ", 1)
                   .replace("PYTHONPATH=examples privaudit ", f"PYTHONPATH=examples:{ROOT} {sys.executable} -m privaudit ")
                   .replace("privaudit plan ", f"PYTHONPATH={ROOT} {sys.executable} -m privaudit plan "))
        for old, new in replace:
            command = command.replace(old, new)
        done = subprocess.run(["bash", "-c", command], cwd=tmp, env=env, capture_output=True, text=True, timeout=3000)
        assert done.returncode == (audit_status if i == len(commands) - 1 else 0), (command, done.stderr[-2000:])
    return json.loads((tmp / "my-audit" / "report" / "report.json").read_text())


def test_readme_flow_has_the_three_commands():
    commands = readme_flow()
    assert [c.split()[0] for c in commands] == ["python", "privaudit", "PYTHONPATH=examples"]
    assert "--members my-audit/members.npz --nonmembers my-audit/nonmembers.npz" in commands[2]
    assert "--opacus-state my-audit/accountant.pt --delta 1e-5" in commands[2]


@pytest.mark.slow  # 45 s: the README flow end to end; its commands are parsed by the default run (test_readme_flow_has_the_three_commands), the audit path is run by tests/test_audit_model*.py
def test_readme_flow_reduced(tmp_path):
    """The README's flow at a test's size (1 epoch, 8 canary runs a side): a verdict on Opacus' own claim, the
    design's ceiling, and the report."""
    report = run_flow(tmp_path, {"OPACUS_AUDIT_EPOCHS": "1"}, (("--out my-audit/report",
                                                                "--canary-runs 8 --out my-audit/report"),))
    assert report["claim"]["epsilon"] == pytest.approx(8.0, abs=0.05)  # privaudit's RDP on Opacus' history
    assert set(report["attacks"]) == {"loss", "canary"} and report["verdict_attack"] == "canary"
    detail = report["verdict_detail"]
    assert report["verdict"] == "not refuted" and not detail["refutable"] and detail["ceiling"] < 8
    assert "cannot refute: ceiling" in detail["statement"]
    assert detail["statement"] in (tmp_path / "my-audit" / "report" / "report.md").read_text()
    assert (tmp_path / "my-audit" / "report" / "report.html").is_file()


@pytest.mark.slow  # several minutes of CPU: 2 x (Opacus training, 2000 canary runs, the mechanism tests)
@pytest.mark.parametrize("scale, refuted", [("1", False), ("0.1", True)], ids=["honest", "tenth of the noise"])
def test_readme_flow_refutes_a_tenth_of_the_noise_and_not_the_honest_model(tmp_path, scale, refuted):
    report = run_flow(tmp_path, {"OPACUS_AUDIT_NOISE_SCALE": scale}, audit_status=int(refuted))
    detail = report["verdict_detail"]
    print(f"\nnoise scale {scale}: {detail['statement']}")
    assert detail["refutable"] and detail["ceiling"] > report["claim"]["epsilon"]  # the design can refute 8
    assert (report["verdict"] == "refuted") is refuted
    assert f"could show up to {detail['ceiling']:.3g}" in detail["statement"]  # each report states its ceiling
    assert f"could show up to {detail['ceiling']:.3g}" in (tmp_path / "my-audit" / "report" / "report.md").read_text()
