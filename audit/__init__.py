"""privaudit's harness, the top of the house: CLI, suites, runner, sensitivity checks, reports and the CI gate.

Nothing in ``core``, ``accountants``, ``defenses`` or ``attacks`` imports this package
(``tests/test_import_layers.py`` enforces it). Inside it, one subpackage per concern, each importing only those
before it: ``sensitivity`` -> ``step`` -> ``report`` -> ``suite`` -> ``gate`` -> ``run`` -> ``verify`` -> ``user``,
then the command line (``commands``, ``cli``); ``failures``, ``device`` and ``findings`` are shared by all of them.
"""

from privaudit.core.version import __version__

__all__ = ["__version__"]
