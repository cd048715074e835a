"""Canary audits: inserted examples, white-box gradient canaries run through a defense's own engine, canary users, the
probes on a step's other releases, and the bounds from their finished scores."""
