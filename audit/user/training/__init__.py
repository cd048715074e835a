"""``privaudit audit-training``: your own DP training run watched as it runs, its releases replayed on neighbours,
canaries planted in its steps, and the report."""
