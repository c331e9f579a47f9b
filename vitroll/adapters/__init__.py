"""Model sources: each enters vitroll through :func:`register_family`; timm's, torchvision's, transformers' (vision,
image–text, text and captioners) and open_clip's are registered here."""

from vitroll.adapters import timm as _timm  # noqa: F401  (registers timm's families)
from vitroll.adapters import torchvision as _torchvision  # noqa: F401  (registers the torchvision family)
from vitroll.adapters import transformers as _transformers  # noqa: F401  (registers transformers' families)
from vitroll.adapters import open_clip as _open_clip  # noqa: F401  (registers open_clip's families)
from vitroll.adapters import transformers_text as _transformers_text  # noqa: F401  (registers its text families)
from vitroll.adapters import captioner as _captioner  # noqa: F401  (registers transformers' captioners)
from vitroll.adapters.base import register_family
from vitroll.adapters.tokenizers import use_tokenizer

__all__ = ["register_family", "use_tokenizer"]
