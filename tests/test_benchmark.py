"""The Fashion-MNIST benchmark's machinery at a tiny size: its real suite file, shrunk, run end to end on tiny files
in the real IDX format (the real loader reads them), measured into a reference, judged and rendered; the committed
page is the committed reference's render."""

from __future__ import annotations

import copy
import gzip
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "benchmark-fashion-mnist.toml"
#: What shrinks each cell (training length, batch, users, samples) while keeping its method and architecture.
TINY = {"epochs": 1, "batch_size": 32, "rounds": 2, "clients_per_round": 2, "users_per_client": 2, "local_steps": 1,
        "local_batch_size": 8, "sensitivity_m": 3, "curve_draws": 2}


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file as Fashion-MNIST ships it (big-endian header: magic 0x0803 / 0x0801, then the sizes), gzipped."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def tiny_fashion(directory: Path, n_train: int = 240, n_test: int = 60) -> Path:
    """Class-dependent tiny images (a bright square whose place is the label) in the four Fashion-MNIST files."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        images = rng.integers(0, 60, (n, 28, 28))
        for i, y in enumerate(labels):
            r, c = divmod(int(y), 5)
            images[i, 4 + 12 * r: 12 + 12 * r, 1 + 5 * c: 6 + 5 * c] += 180
        write_idx(directory / f"{prefix}-images-idx3-ubyte", images)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte", labels)
    return directory


def tiny_suite(data_dir: Path, out: Path):
    """The shipped suite with every cell shrunk by :data:`TINY` (only the keys a defense has)."""
    from privaudit.audit.suite.load import parse_suite
    from privaudit.defenses.registry import defense_class

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    raw = tomllib.loads(SUITE.read_text(encoding="utf-8"))
    raw = copy.deepcopy(raw)
    raw["data_dir"] = str(data_dir)
    for entry in raw["defenses"]:
        fields = defense_class(entry["name"]).Config.__dataclass_fields__
        entry["params"] = {**entry.get("params", {}), **{k: v for k, v in TINY.items() if k in fields}}
    return parse_suite(raw, str(SUITE), out=str(out))


#: The cells the default run keeps (the floors, non-private, DP-GCL at both epsilons, the ALM): every kind of cell
#: the page reads, in about ten seconds; the slow test runs all of them.
DEFAULT_CELLS = ["*/pixels/*", "*/untrained/*", "*/nonprivate/*", "*/dp-gcl/*", "*/alm/eps=10/*"]


def run_tiny(root: Path, only: list[str] | None):
    """The shrunk benchmark run (in process) and its measured reference."""
    from privaudit.audit.benchmark.reference import measure
    from privaudit.audit.run.runner import run_suite

    suite = tiny_suite(tiny_fashion(root / "data"), root / "run")
    result = run_suite(suite, progress=False, jobs=1, only=only)
    return result, measure(root / "run")


@pytest.fixture(scope="module")
def tiny_benchmark(tmp_path_factory):
    return run_tiny(tmp_path_factory.mktemp("benchmark"), DEFAULT_CELLS)


def check_cells(reference, n_train: int = 240, n_test: int = 60) -> None:
    """Every cell ran, trained on every training image and kept its correctness on every test image."""
    errors = [c["id"] + ": " + str(c["error"]) for c in reference["cells"] if c["error"]]
    assert not errors, errors
    for cell in reference["cells"]:
        assert cell["n_train"] == n_train, cell["id"]  # every training image, none held out
        for metric in ("linear_probe_accuracy", "knn_accuracy"):
            assert cell["vs_init"][metric]["n"] == n_test
            assert 0.0 <= cell["utility"][metric] <= 1.0
            assert len(cell["correct"]["trained"][metric]) == 12  # ceil(60 / 8) bytes, base64: 12 characters


def test_the_suite_runs_and_keeps_per_example_correctness(tiny_benchmark):
    result, reference = tiny_benchmark
    check_cells(reference)
    labels = {(c["label"], c["target_epsilon"]) for c in reference["cells"]}
    assert labels == {("pixels", None), ("untrained", None), ("nonprivate", None), ("dp-gcl", 1.0), ("dp-gcl", 10.0),
                      ("alm", 10.0)}
    pixels = next(c for c in reference["cells"] if c["label"] == "pixels")
    assert pixels["utility"]["linear_probe_accuracy"] > 0.9  # the bright square is linearly separable
    assert pixels["epsilon"]["pld"] == 0.0  # the floors read no data
    alm = next(c for c in reference["cells"] if c["label"] == "alm")
    assert {r["mechanism"] for r in alm["curve"]} >= {"logistic", "laplace", "gaussian-zcdp"}
    assert reference["run"]["cells_timed"] == len(reference["cells"])
    assert reference["run"]["peak_rss_mb"] > 50


def test_the_reference_is_judged_and_rendered(tiny_benchmark):
    """Claims whose cells ran get a verdict, the others read "not measured"; the page renders either way."""
    from privaudit.audit.benchmark.claims import utility_claims
    from privaudit.audit.benchmark.page import render
    from privaudit.audit.benchmark.verdict import MISSING, judge

    _, reference = tiny_benchmark
    verdicts = {v.claim.id: v.verdict for v in judge(reference)}
    assert list(verdicts) == [c.id for c in utility_claims()]
    for measured in ("dpgcl-t1-above-base", "dpgcl-t1-epsilon", "dpgcl-t13-nonprivate", "alm-s6-below-gaussian"):
        assert verdicts[measured] != MISSING, measured
    assert verdicts["dpgcl-t1-above-dp-clip"] == MISSING  # no dp-clip cell in this run
    page = render(json.loads(json.dumps(reference)))  # what the committed JSON reads back as
    assert "| DP-GCL | 81.5 / " in page and "dpgcl-t1-above-dp-clip" in page and "alm-s6-below-gaussian" in page


@pytest.mark.slow
def test_every_cell_of_the_suite_runs_and_every_claim_is_judged(tmp_path):
    """The whole shrunk suite (25 cells, a few minutes): every method, every claim measured."""
    from privaudit.audit.benchmark.verdict import MISSING, judge

    _, reference = run_tiny(tmp_path, None)
    check_cells(reference)
    labels = {(c["label"], c["target_epsilon"]) for c in reference["cells"]}
    for label in ("dp-gcl", "dp-clip", "dpsgd", "logit-dp", "logit-dp-net", "dp-clip-net", "dpcl-simclr",
                  "dp-fedemb", "dp-fedavg", "alm"):
        assert {(label, 1.0), (label, 10.0)} <= labels, label
    assert {("nonprivate", None), ("untrained", None), ("pixels", None), ("dpsgd-classifier", 3.0)} <= labels
    missing = [v.claim.id for v in judge(reference) if v.verdict == MISSING]
    assert not missing, missing


def test_committed_page_is_the_reference_render():
    done = subprocess.run([sys.executable, "scripts/render_benchmark.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
