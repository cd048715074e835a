"""Suite files: the grid they expand to, and bad suites exit 2 with one line naming the problem, writing nothing."""


import pytest

from privaudit.audit.cli import main
from privaudit.core.errors import ConfigError
from privaudit.audit.suite.load import load_suite, parse_suite

GOOD = """
name = "grid"
out = "{out}"
allow_plugins = true
seeds = [0, 1]
epsilons = [1.0, 4.0]

[[defenses]]
name = "nonprivate"
params = {{ epochs = 1 }}

[[defenses]]
name = "leaky_defense:NoisyKernelSum"
label = "kernel"
epsilons = [2.0]
attacks = ["loss"]

[[attacks]]
name = "loss"

[[attacks]]
name = "lira"
params = {{ shadow_models = 4 }}
"""


def write(tmp_path, text, name="suite.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_grid_expansion_collapses_the_epsilon_axis_of_non_private_defenses(tmp_path):
    suite = load_suite(write(tmp_path, GOOD.format(out=tmp_path / "out")))
    ids = [c.id for c in suite.cells()]
    assert ids == ["digits/nonprivate/seed=0", "digits/nonprivate/seed=1",
                   "digits/kernel/eps=2/seed=0", "digits/kernel/eps=2/seed=1"]
    cells = {c.id: c for c in suite.cells()}
    assert [a.label for a in cells["digits/kernel/eps=2/seed=0"].attacks] == ["loss"]
    assert [a.label for a in cells["digits/nonprivate/seed=0"].attacks] == ["loss", "lira"]
    assert cells["digits/nonprivate/seed=0"].target_epsilon is None
    # Resolved configurations (defaults included) are hashed: same suite, same keys; a parameter change, new key.
    assert cells["digits/nonprivate/seed=0"].defense.resolved["batch_size"] == 128
    again = {c.id: c.key for c in load_suite(write(tmp_path, GOOD.format(out=tmp_path / "out"), "b.toml")).cells()}
    assert again == {i: c.key for i, c in cells.items()}
    changed = load_suite(write(tmp_path, GOOD.format(out=tmp_path / "out").replace("epochs = 1", "epochs = 2"), "c.toml"))
    assert {c.id: c.key for c in changed.cells()}["digits/nonprivate/seed=0"] != cells["digits/nonprivate/seed=0"].key
    assert [c.id for c in suite.cells(["*/kernel/*"])] == ["digits/kernel/eps=2/seed=0", "digits/kernel/eps=2/seed=1"]


BASE = """
name = "bad"
allow_plugins = true
epsilons = [1.0]
[[defenses]]
name = "nonprivate"
[[attacks]]
name = "loss"
"""


@pytest.mark.parametrize("text,message", [
    (BASE + "colour = 'red'\n", "attacks[0].colour: unknown key; accepted: name, label, params"),
    ("frobnicate = 1\n" + BASE, "frobnicate: unknown key; accepted: name"),
    (BASE.replace('name = "nonprivate"', 'name = "magic"'),
     "defenses[0].name: unknown defense 'magic'; accepted: nonprivate"),
    (BASE.replace("epsilons = [1.0]", "epsilons = [0.0]").replace('"nonprivate"', '"leaky_defense:NoisyKernelSum"'),
     "epsilons[0]: must be a finite number > 0, got 0.0"),
    (BASE.replace("epsilons = [1.0]", "epsilons = [-2]"), "epsilons[0]: must be a finite number > 0, got -2"),
    (BASE.replace("epsilons = [1.0]", "epsilons = [1.0]\ndelta = 1.0"), "delta: must lie in (0, 1), got 1.0"),
    (BASE.replace("epsilons = [1.0]", "epsilons = [1.0]\ndelta = 2"), "delta: must lie in (0, 1), got 2"),
    (BASE.replace('name = "loss"', 'name = "telepathy"'), "attacks[0].name: unknown attack 'telepathy'; accepted: loss"),
    (BASE + "[[defenses]]\nname = 'nonprivate'\nlabel = 'np2'\nparams = { epochs = -1 }\n",
     "defenses[1].params: epochs: must be > 0, got -1"),
    (BASE + "[[defenses]]\nname = 'nonprivate'\nlabel = 'np2'\nparams = { wings = 2 }\n",
     "defenses[1].params: defense 'nonprivate': unknown parameter 'wings'"),
    (BASE + "[[defenses]]\nname = 'nonprivate'\n", "defenses[1].label: duplicate label 'nonprivate'"),
    (BASE.replace("epsilons = [1.0]\n", "") + "[[defenses]]\nname = 'leaky_defense:NoisyKernelSum'\n",
     "defenses[1].epsilons: defense 'leaky_defense:NoisyKernelSum' is private: give epsilons"),
    (BASE.replace('name = "nonprivate"', 'name = "nonprivate"\nepsilons = [1.0]'),
     "defenses[0].epsilons: defense 'nonprivate' is not private; remove epsilons"),
    (BASE.replace('name = "nonprivate"', 'name = "nonprivate"\nattacks = ["lira"]'),
     "defenses[0].attacks[0]: unknown attack label 'lira'; accepted: loss"),
    (BASE + "[gate]\nepsilon_slack = -1\n", "epsilon_slack: must be a finite number >= 0"),
    (BASE + "[gate]\nstrict = true\n", "gate: unknown parameter 'strict'; accepted: epsilon_slack"),
    (BASE.replace("epsilons = [1.0]", "epsilons = [1.0]\ndatasets = ['imagenet']"),
     "datasets[0]: unknown value 'imagenet'; accepted: digits"),
    (BASE.replace("epsilons = [1.0]", "epsilons = [1.0]\nseeds = 3"), "seeds: expected a non-empty list of integers"),
    (BASE.replace('name = "nonprivate"', 'name = "no_such_module:Thing"'),
     "defenses[0].name: cannot load plugin defense 'no_such_module:Thing'"),
    (BASE + "[sensitivity]\nclaims = ['dpcl.mean']\nexpect = { 'dpcl.mean' = 'maybe' }\n",
     "sensitivity.expect.dpcl.mean: unknown value 'maybe'; accepted: holds, violated"),
    ("name = 'bad'\n[[defenses]\n", "invalid TOML"),
    (BASE.replace("epsilons = [1.0]", "epsilons = [1.0]\nsplits = { inclusion_probability = 1.0 }"),
     "defenses[0].attacks: splits.inclusion_probability = 1 trains on every pool example, so there are no "
     "non-members to attack; give attacks = []"),
    (BASE.replace("epsilons = [1.0]", "epsilons = [1.0]\nsplits = { inclusion_probability = 0.7 }"),
     "splits.inclusion_probability: must be 0.5 or 1, got 0.7"),
    (BASE + "[utility]\nper_example = 'yes'\n", "utility.per_example: expected true or false, got 'yes'"),
    (BASE + "[utility]\nbaseline = true\n", "utility: unknown parameter 'baseline'; accepted: reference, per_example"),
])
def test_bad_suite_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, text, message):
    out = tmp_path / "out"
    path = write(tmp_path, text.replace('name = "bad"', f'name = "bad"\nout = "{out}"'))
    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"privaudit: error: {path}: ")
    assert message in err
    assert not out.exists()


def test_missing_suite_file_and_unmatched_only_exit_2(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.toml")]) == 2
    assert "suite file not found" in capsys.readouterr().err
    path = write(tmp_path, BASE.replace('name = "bad"', f'name = "bad"\nout = "{tmp_path / "out"}"'))
    assert main(["run", str(path), "--only", "cifar10/*"]) == 2
    err = capsys.readouterr().err
    assert "--only: no cell matches 'cifar10/*'; cell ids look like: digits/nonprivate/seed=0" in err
    assert main(["run", str(path), "--executor", "slurm"]) == 2
    assert "--executor: unknown value 'slurm'; accepted: local, ray" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_sensitivity_section_against_the_register():
    """Claims are validated against the register; a bare key (``dpgcl.group``) names all its variants."""
    raw = {"defenses": [{"name": "nonprivate"}], "sensitivity": {"all": True}}
    config = parse_suite(raw, "s.toml").sensitivity
    assert config.claims is None and config.budget_seconds is None and config.evaluations is None
    config = parse_suite({**raw, "sensitivity": {"claims": ["dpgcl.group"], "evaluations": 50,
                                                 "expect": {"dpgcl.group[chunk]": "violated"}}}, "s.toml").sensitivity
    assert config.claims == ("dpgcl.group",) and config.evaluations == 50
    assert config.expect == {"dpgcl.group[chunk]": "violated"}
    with pytest.raises(ConfigError, match=r"sensitivity.claims\[0\]: unknown claim 'dpcl.nope'; accepted: "):
        parse_suite({**raw, "sensitivity": {"claims": ["dpcl.nope"]}}, "s.toml")
    with pytest.raises(ConfigError, match=r"sensitivity.expect.dpcl.nope: unknown claim"):
        parse_suite({**raw, "sensitivity": {"all": True, "expect": {"dpcl.nope": "holds"}}}, "s.toml")
    with pytest.raises(ConfigError, match="give either claims or all = true"):
        parse_suite({**raw, "sensitivity": {"claims": ["dpcl.mean"], "all": True}}, "s.toml")


def test_utility_settings_reach_the_cells_and_change_no_other_suites_keys(tmp_path):
    """``[utility]`` is part of a cell's key only where it differs from the defaults: a suite without it keeps the
    keys (and so the caches and references) it had."""
    plain = parse_suite({"name": "u", "epsilons": [1.0], "defenses": [{"name": "nonprivate"}]}, "u.toml")
    same = parse_suite({"name": "u", "epsilons": [1.0], "defenses": [{"name": "nonprivate"}],
                        "utility": {"reference": True, "per_example": False}}, "u.toml")
    kept = parse_suite({"name": "u", "epsilons": [1.0], "defenses": [{"name": "nonprivate"}],
                        "utility": {"reference": False, "per_example": True}}, "u.toml")
    (a,), (b,), (c,) = plain.cells(), same.cells(), kept.cells()
    assert a.key == b.key != c.key and "utility" not in a.resolved()
    assert c.utility.per_example and not c.utility.reference
    assert c.resolved()["utility"] == {"reference": False, "per_example": True}
    assert "utility" not in plain.to_dict() and kept.to_dict()["utility"] == {"reference": False, "per_example": True}
