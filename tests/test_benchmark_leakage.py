"""The benchmark's leakage and white-box suites at a tiny size: their real suite files, shrunk, run end to end on
tiny files in the real IDX format, measured into references, rendered; every page number recomputes from the scores
exported beside the reference; the white-box suite's cells are the benchmark's, label for label."""

from __future__ import annotations

import copy
import io
import json

import numpy as np
import pytest

from test_benchmark import ROOT, TINY, tiny_fashion

LEAKAGE = ROOT / "suites" / "benchmark-fashion-mnist-leakage.toml"
WHITEBOX = ROOT / "suites" / "benchmark-fashion-mnist-whitebox.toml"
#: The attacks each kept cell runs at the tiny size (2 and 4 references of 4 trained in pairs).
KEEP = {"supervised": ["loss", "lira-2", "lira-4", "rmia-2", "rmia-4"], "nonprivate": ["loss"], "dp-gcl": ["loss"]}
SMALL_ATTACK = {"trained_references": 4, "n_population": 24, "n_anchors": 8, "n_views": 2, "shadow_models": 2}


def _toml(path):
    import tomllib

    return tomllib.loads(path.read_text(encoding="utf-8"))


def tiny(path, data_dir, out, keep=None, splits=None):
    """The shipped suite with its cells, attacks and splits shrunk (only the keys each one has)."""
    from privaudit.attacks.registry import attack_class
    from privaudit.audit.suite.load import parse_suite
    from privaudit.defenses.registry import defense_class

    raw = copy.deepcopy(_toml(path))
    raw["data_dir"] = str(data_dir)
    raw["splits"] = {**raw["splits"], **(splits or {})}
    if keep is not None:
        raw["defenses"] = [d for d in raw["defenses"] if d["name"] in keep]
        for d in raw["defenses"]:
            d["attacks"] = keep[d["name"]]
            d.pop("primary", None)
    for entry in raw["defenses"]:
        fields = defense_class(entry["name"]).Config.__dataclass_fields__
        entry["params"] = {**entry.get("params", {}), **{k: v for k, v in TINY.items() if k in fields}}
    for entry in raw["attacks"]:
        fields = attack_class(entry["name"]).Config.__dataclass_fields__
        params = entry.setdefault("params", {})
        for k, v in SMALL_ATTACK.items():
            if k in fields and (k != "shadow_models" or entry["name"] in ("shadow", "encodermi")):
                params[k] = v
        used = max(params.get("shadow_models", 0), params.get("reference_models", 0))
        if "trained_references" in params and entry.get("label") not in KEEP["supervised"]:
            params["trained_references"] = used  # only the classifier's attacks share 4 (the prefix test)
    return parse_suite(raw, str(path), out=str(out))


@pytest.fixture(scope="module")
def tiny_leakage(tmp_path_factory):
    from privaudit.audit.benchmark.leakage import measure_leakage
    from privaudit.audit.run.runner import run_suite

    root = tmp_path_factory.mktemp("leakage")
    suite = tiny(LEAKAGE, tiny_fashion(root / "data", n_train=400), root / "run", KEEP, {"max_examples": None})
    run_suite(suite, progress=False, jobs=1, only=["*/supervised/*", "*/nonprivate/*", "*/dp-gcl/eps=1/*"])
    return root / "run", measure_leakage(root / "run")


@pytest.mark.slow  # the tiny leakage run (about 8 s); the default run recomputes the committed reference from its
# committed scores (below) and checks the committed page is its render (test_benchmark.py)
def test_every_attack_is_measured_from_its_scores_and_the_scores_recompute_the_page(tiny_leakage):
    from privaudit.attacks import metrics
    from privaudit.audit.benchmark.leakage import export_scores

    run, reference = tiny_leakage
    cells = {c["label"]: c for c in reference["cells"]}
    assert {k: sorted(cells[k]["attacks"]) for k in KEEP} == {k: sorted(v) for k, v in KEEP.items()}
    two, four = cells["supervised"]["attacks"]["lira-2"], cells["supervised"]["attacks"]["rmia-4"]
    assert two["counts"] == {"n_reference_models": 2, "n_references_trained": 4, "n_in_per_candidate": 1}
    assert four["counts"]["n_references_trained"] == 4 and {"online", "offline"} <= set(four["tests"])
    pool = 300  # 400 training images, a quarter the attacker's population
    for cell in cells.values():
        for entry in cell["attacks"].values():
            for row in entry["tests"].values():
                assert row["n_members"] + row["n_nonmembers"] == pool and 0 <= row["auc"] <= 1
    exported = export_scores(run)
    for cell in cells.values():
        arrays = np.load(io.BytesIO(exported[cell["id"].replace("/", "__") + ".npz"]))
        m = arrays["membership"]
        for label, entry in cell["attacks"].items():
            row = entry["tests"][entry["primary"]]
            scores = arrays[f"{label}/{entry['primary']}"]
            assert metrics.auc(scores, m) == row["auc"]
            assert round(metrics.tpr_at_fpr(scores, m, 0.01) * m.sum()) == row["tp"]["0.01"]


@pytest.mark.slow  # the tiny leakage run (about 8 s); the default run recomputes the committed reference from its
# committed scores (below) and checks the committed page is its render (test_benchmark.py)
def test_the_leakage_sections_render_with_exact_intervals_and_the_gate(tiny_leakage):
    from privaudit.audit.benchmark.leakage import tpr_interval
    from privaudit.audit.benchmark.leakage_page import leakage_lines, offline_comparison

    _, reference = tiny_leakage
    reference = json.loads(json.dumps(reference))  # what the committed JSON reads back as
    page = "\n".join(leakage_lines(reference))
    assert "### The non-private classifier" in page and "### The non-private encoder" in page
    assert "| LiRA | 2 (1 OUT) | online-fixed (primary) |" in page and "### The DP cells, gated" in page
    supervised = next(c for c in reference["cells"] if c["label"] == "supervised")
    _, rows = offline_comparison(supervised)
    assert [(r["out"], r["k"]) for r in rows] == [(1, 2), (2, 4)]
    row = supervised["attacks"]["loss"]["tests"]["cross-entropy"]
    tpr, low, high = tpr_interval(row, 0.01)
    assert low <= tpr <= high and tpr == row["tp"]["0.01"] / row["n_members"]
    gated = next(c for c in reference["cells"] if c["label"] == "dp-gcl")
    assert {c["verdict"] for c in gated["comparisons"] if c["attack"] == "loss"} <= {"consistent", "secondary"}


def test_the_whitebox_suite_is_the_benchmark_s_dp_cells_label_for_label():
    shipped = _toml(ROOT / "suites" / "benchmark-fashion-mnist.toml")["defenses"]
    benchmark = {d.get("label", d["name"]): d for d in shipped}
    whitebox = _toml(WHITEBOX)
    assert whitebox["splits"] == _toml(ROOT / "suites" / "benchmark-fashion-mnist.toml")["splits"]
    labels = [d.get("label", d["name"]) for d in whitebox["defenses"]]
    private = {"dp-gcl", "dp-clip", "dpcl-simclr", "dp-clip-net", "logit-dp-net", "dp-fedemb", "dp-fedavg", "dpsgd",
               "logit-dp"}
    assert set(labels) == private
    for d in whitebox["defenses"]:
        label = d.get("label", d["name"])
        assert d["params"] == benchmark[label]["params"] and d["name"] == benchmark[label]["name"], label
        assert d["primary"] == ("user-canary" if d["name"] in ("dp-fedemb", "dp-fedavg") else "gradient-canary")


# slow: a DP-GCL cell and its canary run (about 10 s); the default run keeps the suite's parse
# (test_design_assumptions.py::test_a_suite_that_trains_on_every_pool_example_runs_only_its_own_canaries) and the
# gradient canaries end to end (tests/test_gradient_canary_audit.py)
@pytest.mark.slow
def test_the_whitebox_suite_runs_its_canaries_on_every_member_and_renders(tmp_path):
    from privaudit.audit.benchmark.leakage import measure_leakage
    from privaudit.audit.benchmark.leakage_page import whitebox_lines, whitebox_rows
    from privaudit.audit.run.runner import run_suite

    suite = tiny(WHITEBOX, tiny_fashion(tmp_path / "data"), tmp_path / "run")
    run_suite(suite, progress=False, jobs=1, only=["*/dp-gcl/eps=1/*"])
    reference = json.loads(json.dumps(measure_leakage(tmp_path / "run")))
    (row,) = whitebox_rows(reference)
    assert row["attack"] == "gradient-canary" and row["accountant"] == "pld" and row["verdict"] == "consistent"
    assert 0 < row["eps_lower_bound"] <= row["epsilon"] and row["ratio"] == row["eps_lower_bound"] / row["claim"]
    assert row["method"] == "white-box-trajectory" and row["steps"] > 0
    # DP-GCL's claim is its gradient release alone: the gate compares with the whole claim
    assert row["claim"] == row["epsilon"] and row["of_compared"] == row["ratio"]
    page = "\n".join(whitebox_lines(reference))
    assert (f"| dp-gcl at 1 | {row['steps']} | {row['claim']:.3f} | {row['epsilon']:.3f} (pld) | "
            f"{row['eps_lower_bound']:.3f} | {row['ratio']:.3f} |") in page
    assert "Not run (17 cells" in page  # the tiny run ran one cell of the suite's 18


def test_the_committed_leakage_reference_recomputes_from_its_committed_scores():
    """Every AUC and TPR numerator of the committed reference (the page's numbers) is what the committed float32
    scores give; one member's score moved moves a number, so the check can fail."""
    from privaudit.attacks import metrics

    directory = ROOT / "reports" / "reference" / "benchmark-fashion-mnist-leakage"
    reference = json.loads((directory / "leakage.json").read_text(encoding="utf-8"))
    checked = 0
    for cell in reference["cells"]:
        arrays = np.load(directory / "scores" / (cell["id"].replace("/", "__") + ".npz"))
        m = arrays["membership"]
        for label, entry in cell["attacks"].items():
            for test, row in entry["tests"].items():
                scores = arrays[f"{label}/{test}"]
                assert metrics.auc(scores, m) == row["auc"], (cell["id"], label, test)
                for key, n in row["tp"].items():
                    assert round(metrics.tpr_at_fpr(scores, m, float(key)) * m.sum()) == n, (cell["id"], label, key)
                checked += 1
    assert checked >= 60
    supervised = next(c for c in reference["cells"] if c["label"] == "supervised")
    scores, m = np.load(directory / "scores" / "fashion-mnist__supervised__seed=0.npz")["rmia-16/online"].copy(), \
        np.load(directory / "scores" / "fashion-mnist__supervised__seed=0.npz")["membership"]
    scores[np.flatnonzero(m)[np.argmax(scores[m])]] = scores.min() - 1.0  # the top member sent to the bottom
    assert metrics.auc(scores, m) < supervised["attacks"]["rmia-16"]["tests"]["online"]["auc"]


@pytest.mark.parametrize("path", [LEAKAGE, WHITEBOX], ids=["leakage", "whitebox"])
def test_each_side_suite_s_reference_gives_every_cell_its_progress_priors(path):
    """The suite's `timings` is its committed reference, which holds every cell's measured stages (the progress line
    estimates from them, not from the generic priors that read minutes of training as seconds)."""
    from privaudit.audit.run.stage_costs import measured_priors
    from privaudit.audit.suite.load import parse_suite

    suite = parse_suite(_toml(path), str(path), machine_checks=False)
    priors = measured_priors(ROOT / suite.timings)
    missing = [c.id for c in suite.cells() if priors.get(c.id, {}).get("train", 0) <= 0]
    assert not missing, f"{suite.timings} has no train time for {missing}"
    for cell in suite.cells():
        assert {a.label for a in cell.attacks} <= set(priors[cell.id]), cell.id


def _side_cell(cell_id: str, gate: str = "pass", bound: float = 0.5) -> dict:
    label, eps = cell_id.split("/")[1], float(cell_id.split("/")[2].removeprefix("eps="))
    return {"id": cell_id, "label": label, "target_epsilon": eps, "epsilon": {"pld": eps}, "gate": gate,
            "attacks": {"gradient-canary": {}}, "comparisons": [
                {"attack": "gradient-canary", "eps_lower_bound": bound * eps, "epsilon": eps, "accountant": "pld",
                 "verdict": "consistent", "method": "white-box-trajectory"}]}


def test_a_run_of_some_cells_replaces_theirs_in_the_whitebox_reference_each_naming_its_commit():
    """merge_cells: the re-measured cells replace theirs (each with the update's commit), the full run's commit and
    gate stay, the update is listed with its cells' gates and its reasons other than the cells it did not run; a
    later update of the same cells replaces the earlier's record; a cell the reference lacks, or a run of none, is
    refused; the page names each update."""
    from privaudit.audit.benchmark.leakage import merge_cells
    from privaudit.audit.benchmark.leakage_page import whitebox_lines
    from privaudit.core.errors import ConfigError

    ids = ["f/a/eps=1/seed=0", "f/a/eps=10/seed=0", "f/b/eps=1/seed=0"]
    full = {"commit": "full", "gate": "pass", "gate_reasons": [], "cells": [_side_cell(i) for i in ids]}
    ran = {**_side_cell(ids[2], bound=0.9)}
    update = {"commit": "upd", "gate": "fail", "run": {"wall_seconds": 129.0},
              "gate_reasons": [f"cell {ids[0]}: no result (it has not run in this output directory)",
                               f"cell {ids[2]}: something wrong"],
              "cells": [{**_side_cell(ids[0]), "attacks": {}}, ran]}
    merged = merge_cells(full, update)
    assert [c["id"] for c in merged["cells"]] == ids and merged["cells"][2]["commit"] == "upd"
    assert merged["cells"][2]["comparisons"][0]["eps_lower_bound"] == 0.9 and "commit" not in merged["cells"][0]
    assert (merged["commit"], merged["gate"]) == ("full", "pass")
    (record,) = merged["updates"]
    assert record == {"commit": "upd", "cells": [ids[2]], "cell_gates": {ids[2]: "pass"},
                      "gate_reasons": [f"cell {ids[2]}: something wrong"], "wall_seconds": 129.0}
    page = "\n".join(whitebox_lines(merged))
    assert f"Re-measured at commit `upd` by a run of those cells alone" in page and "something wrong" in page
    again = merge_cells(merged, {**update, "commit": "upd2", "gate_reasons": []})
    assert [u["commit"] for u in again["updates"]] == ["upd2"]
    with pytest.raises(ConfigError, match=r"not in the reference"):
        merge_cells(full, {**update, "cells": [_side_cell("f/c/eps=1/seed=0")]})
    with pytest.raises(ConfigError, match="no cell with an attack result"):
        merge_cells(full, {**update, "cells": [{**ran, "attacks": {}}]})


def test_the_committed_whitebox_reference_reaches_08_of_every_claim_dpcl_s_with_its_whole_step():
    """Every gated DP cell's trajectory bound is at least 0.8 of the claim (the tightest accountant's epsilon) and
    consistent with what it is compared with; DPCL's is compared with its whole claim (its similarity probes observe
    both releases), and the page says which cells were re-measured and at which commit."""
    from privaudit.audit.benchmark.leakage_page import whitebox_lines, whitebox_rows

    reference = json.loads((ROOT / "reports" / "reference" / "benchmark-fashion-mnist-whitebox" / "whitebox.json")
                           .read_text(encoding="utf-8"))
    rows = whitebox_rows(reference)
    assert len(rows) == 18 and all(r["verdict"] == "consistent" for r in rows)
    assert min(r["ratio"] for r in rows) >= 0.8, [(r["label"], r["target_epsilon"], r["ratio"]) for r in rows]
    dpcl = [r for r in rows if r["label"] == "dpcl-simclr"]
    assert len(dpcl) == 2 and all(r["epsilon"] == r["claim"] and r["accountant"] == "pld" for r in dpcl)
    assert any("dpcl-simclr" in i for u in reference["updates"] for i in u["cells"])
    assert "Re-measured at commit" in "\n".join(whitebox_lines(reference))
