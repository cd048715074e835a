"""Audit suites: the data model (:mod:`~privaudit.audit.suite.model`), the TOML validator that builds it
(:mod:`~privaudit.audit.suite.load`), and the suites shipped with the package
(:mod:`~privaudit.audit.suite.shipped`).
"""
