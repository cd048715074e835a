"""How a trained encoder is evaluated: linear and k-NN probes, utility beside its initialisation and non-private
training, and the floors (the untrained encoder, the raw pixels)."""
