"""Step audits: one privatised step (or one release) of a defense audited against its claim, on neighbouring
inputs with shared non-noise randomness; the audit's maths, its runs over a suite, its gate and its table are
separate modules.
"""
