"""Model sources: each enters vitroll through :func:`register_family`; timm's and torchvision's are registered here."""

from vitroll.adapters import timm as _timm  # noqa: F401  (registers timm's families)
from vitroll.adapters import torchvision as _torchvision  # noqa: F401  (registers the torchvision family)
from vitroll.adapters.base import register_family

__all__ = ["register_family"]
