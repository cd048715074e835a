"""The Fashion-MNIST benchmark's machinery at a tiny size: its real suite file, shrunk, run end to end on tiny files
in the real IDX format (the real loader reads them), measured into a reference, judged and rendered; the committed
page is the committed reference's render."""

from __future__ import annotations

import copy
import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

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


#: The cells the default run keeps (the floors, non-private, DP-GCL and the ALM at epsilon 1): every kind of cell the
#: page reads; the slow test runs all of them.
DEFAULT_CELLS = ["*/pixels/*", "*/untrained/*", "*/nonprivate/*", "*/dp-gcl/eps=1/*", "*/alm/eps=1/*"]


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
    assert labels == {("pixels", None), ("untrained", None), ("nonprivate", None), ("dp-gcl", 1.0), ("alm", 1.0)}
    pixels = next(c for c in reference["cells"] if c["label"] == "pixels")
    assert pixels["utility"]["linear_probe_accuracy"] > 0.9  # the bright square is linearly separable
    assert pixels["epsilon"]["pld"] == 0.0  # the floors read no data
    alm = next(c for c in reference["cells"] if c["label"] == "alm")
    assert {r["mechanism"] for r in alm["curve"]} >= {"logistic", "laplace", "gaussian-zcdp"}
    assert reference["run"]["cells_timed"] == len(reference["cells"])
    assert reference["run"]["peak_rss_mb"] > 50


def test_the_reference_is_judged_and_rendered(tiny_benchmark):
    """Every comparison whose two cells ran is measured, every other reads "not measured"; the page renders."""
    from privaudit.audit.benchmark.claims import UtilityClaim, utility_claims
    from privaudit.audit.benchmark.page import render
    from privaudit.audit.benchmark.verdict import MISSING, judge

    _, reference = tiny_benchmark
    ran = {(c["label"], c["target_epsilon"]) for c in reference["cells"]}
    verdicts = judge(reference)
    assert [v.claim.id for v in verdicts] == [c.id for c in utility_claims()]
    measured = 0
    for v in verdicts:
        if not isinstance(v.claim, UtilityClaim):
            continue
        for comp, m in zip(v.claim.comparisons, v.measured):
            present = (comp.a, comp.eps_a) in ran and (comp.b == "init" or (comp.b, comp.eps_b) in ran)
            assert (m.verdict != MISSING) == present, (v.claim.id, comp)
            measured += present
    assert measured == 2  # DP-GCL against its init at epsilon 1, linear and 3-NN
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


def test_committed_page_is_the_reference_render(monkeypatch, capsys):
    """``python scripts/render_benchmark.py --check``, its ``main`` run in this process (no interpreter to start)."""
    import importlib.util

    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # the script imports its neighbour rendered_page
    spec = importlib.util.spec_from_file_location("render_benchmark", ROOT / "scripts" / "render_benchmark.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    code = script.main(["--check"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err


def test_a_missing_dataset_is_one_line_naming_the_package(tmp_path, monkeypatch, capsys):
    """No Fashion-MNIST anywhere: `privaudit run` of the benchmark stops before writing anything, exit 2, one line
    that names the Debian package."""
    import dataclasses

    from privaudit.audit.cli import main
    from privaudit.core.datasets import DATASETS

    monkeypatch.setitem(DATASETS, "fashion-mnist",
                        dataclasses.replace(DATASETS["fashion-mnist"], system=(str(tmp_path / "none"),)))
    monkeypatch.delenv("PRIVAUDIT_DATA_DIR", raising=False)
    code = main(["run", str(SUITE), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "apt-get install dataset-fashion-mnist" in err and "train-images-idx3-ubyte" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_benchmark_trains_on_all_of_fashion_mnist():
    """The real dataset (Debian's package; .ci/slow installs it when it can): the suite's splits give every one of
    the 60,000 training images to training and all 10,000 test images to the evaluation, at delta 1 / (N ln N)."""
    from privaudit.audit.suite.load import load_suite
    from privaudit.core.datasets import SplitConfig, load_dataset, missing_files
    from privaudit.defenses.base import default_delta

    if missing_files("fashion-mnist", None):
        pytest.skip("Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist")
    suite = load_suite(SUITE)
    data = load_dataset("fashion-mnist", seed=0, splits=SplitConfig(**suite.splits))
    assert (len(data.train), len(data.test), len(data.public), len(data.shadow)) == (60_000, 10_000, 0, 0)
    assert len(set(data.train.index.tolist())) == 60_000
    assert default_delta(len(data.train)) == pytest.approx(1 / (60_000 * 11.0020), rel=1e-4)


def test_the_untrained_floor_reads_no_data_and_claims_epsilon_zero(digits):
    """The untrained encoder is the architecture's seeded init; its claim is the no-op event: epsilon 0 under every
    accountant; asked for a budget it refuses (it trains nothing)."""
    from privaudit.accountants import all_epsilons
    from privaudit.core.errors import ConfigError
    from privaudit.defenses.base import Budget
    from privaudit.defenses.nn.model import build_model
    from privaudit.defenses.registry import make_defense

    floor = make_defense("untrained", encoder="cnn", width=4, rep_dim=8)
    t = floor.fit(digits, Budget(), seed=3, progress=False)
    same = build_model(t.spec, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(t.model.state_dict().values(), same.state_dict().values()))
    assert {r.to_dict()["epsilon"] for r in all_epsilons(t.claim).values() if r.to_dict()["epsilon"] is not None} == {0.0}
    with pytest.raises(ConfigError, match="trains nothing"):
        floor.fit(digits, Budget(target_epsilon=1.0), seed=3, progress=False)
