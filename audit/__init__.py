"""privaudit's harness, the top of the house: CLI, suites, runner, sensitivity checks, reports and the CI gate.

Nothing in ``core``, ``accountants``, ``defenses`` or ``attacks`` imports this package
(``tests/test_import_layers.py`` enforces it).
"""

from privaudit.core.version import __version__

__all__ = ["__version__"]
