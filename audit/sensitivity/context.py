"""The shared inputs of the sensitivity checks: the seed, the dataset (loaded once), and the defenses'
privatized quantities at a model state (built once per configuration)."""

from __future__ import annotations

import dataclasses
import inspect
from functools import cached_property
from typing import Any, Mapping

import torch

from privaudit.core.errors import ConfigError
from privaudit.defenses.base import PrivatizedQuantity

TRAINED_EPOCHS = 3  # epochs of non-private contrastive training behind the "trained" model state


class Context:
    """Shared inputs of the checks: the seed, the dataset (loaded once) and built quantities."""

    def __init__(self, seed: int = 0, dataset: str = "digits", data_dir: str | None = None):
        self.seed = int(seed)
        self.dataset = dataset
        self.data_dir = data_dir
        self._quantities: dict[tuple, tuple] = {}
        self._trained: dict[tuple, dict[str, torch.Tensor]] = {}

    @cached_property
    def data(self):
        from privaudit.core.datasets import load_dataset

        return load_dataset(self.dataset, seed=self.seed, data_dir=self.data_dir)

    def describe(self) -> dict[str, Any]:
        return {"seed": self.seed, "dataset": self.dataset, "data_dir": self.data_dir}

    def quantities(self, defense: str, overrides: Mapping[str, Any], model: str = "init",
                   state: Mapping[str, torch.Tensor] | None = None, noise_multiplier: float | None = None
                   ) -> tuple[list[PrivatizedQuantity], dict[str, torch.Tensor] | None, torch.nn.Module | None]:
        """``privatized_quantities`` of ``defense`` built with ``overrides`` at a model state (cached).

        Returns the quantities, the state dict of the model they were built with and that model
        (None, None when the defense builds its own model internally). ``state`` loads given
        parameters (a witness's).
        """
        key = (defense, tuple(sorted((k, repr(v)) for k, v in overrides.items())), model,
               None if state is None else id(state), noise_multiplier)
        if key not in self._quantities:
            from privaudit.defenses.registry import make_defense

            d = make_defense(defense, dict(overrides))
            kwargs, net = self._call_arguments(d, defense, model, state, noise_multiplier)
            qs = list(d.privatized_quantities(self.data, **kwargs))
            saved = None if net is None else {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
            self._quantities[key] = (qs, saved, net)
        return self._quantities[key]

    def _call_arguments(self, d: Any, defense: str, model: str, state: Mapping[str, torch.Tensor] | None,
                        noise_multiplier: float | None) -> tuple[dict[str, Any], torch.nn.Module | None]:
        """The keyword arguments ``d.privatized_quantities`` takes here (seed, progress, pre-gradient noise,
        the model at its state), and that model (None when the defense builds its own)."""
        kwargs: dict[str, Any] = {}
        sig = inspect.signature(d.privatized_quantities).parameters
        if "seed" in sig:
            kwargs["seed"] = self.seed
        if "progress" in sig:
            kwargs["progress"] = False
        if noise_multiplier is not None:
            if "noise_multiplier" not in sig:
                raise ConfigError(f"noise_multiplier: defense {defense!r} has no pre-gradient noise to scale")
            kwargs["noise_multiplier"] = float(noise_multiplier)
        net = None
        if "model" in sig and hasattr(d, "build") and hasattr(d, "model_spec"):
            net = self._model(d, model, state)
            kwargs["model"] = net
        elif model != "init" or state is not None:
            raise ConfigError(f"model: defense {defense!r} builds its own model; only 'init' applies")
        return kwargs, net

    def _model(self, defense: Any, kind: str, state: Mapping[str, torch.Tensor] | None) -> torch.nn.Module:
        """The defense's model at the seed: as initialised, briefly trained, or loaded from ``state``."""
        spec = defense.model_spec(self.data.info)
        net = defense.build(spec, self.seed)
        if state is not None:
            net.load_state_dict(dict(state))
        elif kind in ("trained", "antipodal"):
            net.load_state_dict(self._trained_state(defense, spec))
            if kind == "antipodal":
                from privaudit.audit.sensitivity.extremal.heads import antipodal_head

                x = self.data.train.x[:1].float()
                antipodal_head(net, x, 1.0 - x)
        return net.eval()

    def _trained_state(self, defense: Any, spec: Any) -> dict[str, torch.Tensor]:
        """The parameters after :data:`TRAINED_EPOCHS` epochs of non-private contrastive training on the
        public split (cached per architecture and loss)."""
        from privaudit.defenses.nonprivate import train_contrastive

        cfg = dataclasses.replace(defense.config, epochs=TRAINED_EPOCHS, batch_size=128, lr=1e-3,
                                  optimizer="adam", weight_decay=0.0)
        key = (type(defense).__name__, repr(spec), cfg.loss, cfg.temperature, cfg.barlow_lambda)
        if key not in self._trained:
            trained, _, _ = train_contrastive(self.data.public.x, self.data.info, cfg, self.seed, progress=False)
            self._trained[key] = {k: v.detach().clone() for k, v in trained.state_dict().items()}
        return self._trained[key]
