"""Which torch model zoo realrun trains with: ``realrun.torch_models`` (branch ``zoo``) when
it is present, else the temporary one-model fallback. Delete with ``_zoo_fallback.py``."""

from __future__ import annotations

from types import ModuleType


def models() -> ModuleType:
    """A module with ``build(name)``, ``synthetic_batch(name, n, generator, device)``, ``loss``."""
    try:
        from realrun import torch_models
    except ImportError:
        from realrun import _zoo_fallback as torch_models
    return torch_models
