"""How the defenses train: batch sampling, augmentations, the training loop and its length, independent random streams
from one seed, K models trained together, and public pretraining."""
