"""Attention capture: hooks on the registered attention modules (recorder), per-family token layouts, readouts."""

from vitroll.capture.factored import FactoredAttention, attention_with_log_normalizer
from vitroll.capture.families import FAMILIES, ModelFamily, TokenLayout, family_of
from vitroll.capture.fusion import HEAD_FUSIONS, fuse_heads
from vitroll.capture.precision import without_autocast
from vitroll.capture.readouts import READOUTS, AttentionReadout, readout_for
from vitroll.capture.recorder import AttentionRecorder, attach_sdpa_call, attention_probabilities

__all__ = [
    "FAMILIES", "HEAD_FUSIONS", "READOUTS", "AttentionReadout", "AttentionRecorder", "FactoredAttention", "ModelFamily",
    "TokenLayout", "attach_sdpa_call", "attention_probabilities", "attention_with_log_normalizer", "family_of",
    "fuse_heads", "readout_for", "without_autocast",
]
