"""``privaudit audit-scores``: your own members' and non-members' scores read, audited and bounded at your claim."""
