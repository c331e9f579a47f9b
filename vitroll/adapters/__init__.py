"""Model sources: each enters vitroll through :func:`register_family`; torchvision's ViT is registered here."""

from vitroll.adapters import torchvision as _torchvision  # noqa: F401  (registers the torchvision family)
from vitroll.adapters.base import register_family

__all__ = ["register_family"]
