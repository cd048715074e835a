"""CLI subcommands, one module each (see ``audit.cli.COMMANDS``)."""
