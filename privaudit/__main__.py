"""``python -m privaudit`` runs the privaudit command line."""

from privaudit.audit.cli import entry

entry()
