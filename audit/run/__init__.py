"""Running a suite: cells (:mod:`~privaudit.audit.run.cell`, with their claim checks), the keyed cache of
their results, scheduling over worker processes or Ray, the side checks (sensitivity claims, step audits)
and the orchestration that ties them together (:mod:`~privaudit.audit.run.runner`).
"""
