"""The privacy-loss-distribution accountant on dp-accounting's PLD machinery: its pessimistic and optimistic PLDs of the
subsampled Gaussian, vectorised, and epsilon read off a PLD."""
