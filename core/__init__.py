"""privaudit's floor: what every layer shares and nothing of ours is imported by.

- ``privaudit.core.errors``: ``ConfigError`` and the boundary validators (``one_of``, ``check_positive``, ...);
- ``privaudit.core.datasets``: dataset loading (embedded digits, torchvision's on-disk formats) and the seeded
  public / shadow / test / audit-pool membership splits;
- ``privaudit.core.io``: atomic artifact I/O (JSON, npz, safetensors) and strict JSON;
- ``privaudit.core.config``: building validated config dataclasses from plain mappings;
- ``privaudit.core.registry``: name -> ``module:attr`` registries loaded on first use (defenses, attacks, accountants).

Layers, each importing only those before it: core -> accountants -> defenses -> attacks -> audit -> privaudit.
"""
