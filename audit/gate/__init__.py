"""The CI gate's rules: a run's records (cells, sensitivity verdicts, step audits) judged against the suite's
gate settings. Nothing here runs anything; :mod:`privaudit.audit.run` calls it at the end of a run and
:mod:`privaudit.audit.verify` on a finished run's saved evidence.
"""
