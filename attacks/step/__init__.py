"""One privatised step examined: the optimal test between two neighbouring inputs' releases, and a release's
floating-point support."""
