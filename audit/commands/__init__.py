"""CLI subcommands, one module each (see ``privaudit.audit.cli.COMMANDS``)."""
