"""The Fashion-MNIST benchmark's reference, its page and the register of the papers' utility claims.

``reference`` reads a benchmark run into the reference the page is rendered from; ``claims`` registers the papers'
utility claims; ``verdict`` judges each from the reference; ``page`` and ``sections`` write docs/benchmark.md;
``listing`` lists the claims for ``privaudit claims``.
"""
