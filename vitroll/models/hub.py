"""The Hugging Face hub, reached or not: whether it answers, its offline switch, and whether timm's pretrained weights
may be in a local cache, so that an offline run fails in seconds instead of after retries."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

import torch


def is_hub_name(name: str) -> bool:
    """Whether ``name`` is a timm ``hf-hub:org/name`` (or ``hf_hub:``) model name."""
    return name.startswith(("hf-hub:", "hf_hub:"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub endpoint accepts a TCP connection within ``timeout`` seconds."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = urlparse(constants.ENDPOINT)
    return host_reachable(endpoint.hostname, endpoint.port or 443, timeout)


def host_reachable(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds."""
    answers: list[bool] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                answers.append(True)
        except OSError:
            pass

    # the name lookup inside create_connection ignores its timeout, so the wait is bounded here instead
    probe = threading.Thread(target=connect, name="vitroll-hub-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(answers)


@contextlib.contextmanager
def cache_only(offline: bool) -> Iterator[None]:
    """Make huggingface_hub serve from its cache only (no retries against an unreachable network)."""
    from huggingface_hub import constants

    previous = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = previous or offline
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = previous


_HUB_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors",
                     "open_clip_pytorch_model.bin")


def pretrained_maybe_cached(name: str) -> bool:
    """Whether timm's pretrained weights for ``name`` may be in a local cache (hub cache or torch hub dir).

    Checked from the pretrained config alone, without building the model, so that an offline run without
    cached weights fails before spending seconds on random initialisation. ``True`` when unsure.
    """
    from huggingface_hub import try_to_load_from_cache
    from timm.models import get_pretrained_cfg

    cfg = None if is_hub_name(name) else get_pretrained_cfg(name)
    if cfg is None or cfg.file or cfg.state_dict or cfg.source == "local-dir":
        return True
    if cfg.hf_hub_id:
        repo, _, revision = cfg.hf_hub_id.partition("@")
        files = (cfg.hf_hub_filename,) if cfg.hf_hub_filename else _HUB_WEIGHT_FILES
        if any(isinstance(try_to_load_from_cache(repo, f, revision=revision or None), str) for f in files):
            return True
    if cfg.url:
        return (Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(cfg.url).path).name).is_file()
    return False
