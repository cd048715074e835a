"""privaudit's version, written in this one place: ``pyproject.toml`` reads it (a dynamic ``version``), and
``privaudit.__version__``, ``privaudit.audit.__version__`` (the CLI's ``--version``, each report's ``version``)
re-export it."""

__version__ = "0.1.0"
