"""A finished run verified after the fact: every verdict recomputed from the saved evidence
(:mod:`~privaudit.audit.verify.evidence`, ``privaudit gate``), and the gate's power measured against planted
bugs (:mod:`~privaudit.audit.verify.gate_power`, ``privaudit gate-power``).
"""
