"""privaudit's harness: CLI, datasets, suites, runner, sensitivity checks, reports and the CI gate.

This package's ``__init__`` stays import-light: ``defenses``, ``attacks`` and ``accountants`` import
``audit.errors``, ``audit.io`` and ``audit.datasets`` from it without pulling in the CLI.
"""

__version__ = "0.1.0"
