"""``python -m audit`` runs the privaudit CLI."""

from audit.cli import entry

entry()
