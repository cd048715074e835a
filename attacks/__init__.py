"""Membership inference and auditing attacks on trained models, and their metrics."""
