"""A user's own DP training recorded as it runs: an unmodified Opacus run's releases (its optimizer step, ghost
clipping, every other Gaussian query it noises) and a plain loop's declared releases."""
