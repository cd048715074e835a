"""Sensitivity: sampled (empirical) sensitivity of training algorithms and checks of claimed bounds."""
