"""The noise a release actually added, measured by the white-box canaries: its level, and whether it is fresh across
steps, on every tensor and independent across coordinates."""
