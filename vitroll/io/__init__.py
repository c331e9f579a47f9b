"""Reading inputs: images (robust decoding)."""

from vitroll.io.images import IMAGE_SUFFIXES, encode_png, load_image, write_atomic

__all__ = ["IMAGE_SUFFIXES", "encode_png", "load_image", "write_atomic"]
