"""A step's release: its randomness, the noise and the white-box canary hook (with the probes on its other releases),
what the step records as it runs, and the statistics of the noise's joint law."""
