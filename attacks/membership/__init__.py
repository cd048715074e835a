"""Black-box membership inference: LOSS, Shokri's shadow models, EncoderMI, LiRA and RMIA, and what they share
(reference models, the statistics they read from a model, query augmentations)."""
