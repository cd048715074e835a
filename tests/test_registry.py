"""core.registry: one lazy name -> module:attr mechanism for defenses, attacks, accountants and executors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from privaudit.core.errors import ConfigError
from privaudit.core.registry import Registry, load_reference


def test_load_and_create():
    reg = Registry("thing", {"ordered": "collections:OrderedDict"})
    assert reg.load("ordered").__name__ == "OrderedDict"
    assert reg.create("ordered", a=1) == {"a": 1}
    assert list(reg) == ["ordered"] and "ordered" in reg


def test_unknown_name_lists_accepted():
    reg = Registry("thing", {"a": "collections:OrderedDict", "b": "collections:deque"})
    with pytest.raises(ConfigError, match=r"^thing: unknown value 'c'; accepted: a, b$"):
        reg.load("c")


@pytest.mark.parametrize("ref, message", [
    ("no_colon", "^plugin defense 'no_colon' is not of the form module:attr$"),
    ("collections:", "^plugin defense 'collections:' is not of the form module:attr$"),
    ("no_such_module_xyz:X", "^cannot load plugin defense 'no_such_module_xyz:X': "),
    ("collections:NoSuchThing", "^cannot load plugin defense 'collections:NoSuchThing': "),
])
def test_load_reference_errors_name_the_field(ref, message):
    with pytest.raises(ConfigError, match=message):
        load_reference(ref, field="plugin defense")


def test_the_four_families_share_the_mechanism():
    from privaudit.accountants.registry import ACCOUNTANTS
    from privaudit.attacks.executor import EXECUTORS
    from privaudit.attacks.registry import ATTACKS
    from privaudit.defenses.registry import DEFENSES

    for reg, name in [(ACCOUNTANTS, "rdp"), (ATTACKS, "lira"), (DEFENSES, "dp-gcl"), (EXECUTORS, "local")]:
        assert isinstance(reg, Registry)
        assert reg.load(name).__name__  # every built-in reference resolves
    assert all(isinstance(DEFENSES.load(n), type) for n in DEFENSES)
    assert all(isinstance(ATTACKS.load(n), type) for n in ATTACKS)


def test_listing_names_imports_nothing_heavy():
    code = ("import sys; from privaudit.accountants.registry import ACCOUNTANTS; names = list(ACCOUNTANTS); "
            "print(int('privaudit.accountants.prv' in sys.modules), int('opacus' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "0"]
