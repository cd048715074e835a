"""Audits of a user's own scores or model: the score audit, the model audit with its canary runs and the
final-model audit, the verdict against the user's claim, its report, sizing an audit before training, and the
output directory they write.
"""
