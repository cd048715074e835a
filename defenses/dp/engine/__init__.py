"""The per-unit clipping engine: what a unit is, per-unit gradients (``torch.func`` or layer by layer), their clipped
sum, Logit-DP's pairs, and the parameter space they live in."""
