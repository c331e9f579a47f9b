"""What an audit is made of: its options (and the fields it can group by), one row per image or unreadable file,
and what is known about a decoded frame on its way to the model. The pipeline fills these records; the summary and
the report read them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from vitroll.audit.metrics import MaskSource, MetricSettings
from vitroll.errors import OptionValueError
from vitroll.io.dicom import SAFE_FIELDS
from vitroll.io.images import DEFAULT_MAX_PIXELS
from vitroll.wording import argument

GROUP_FIELDS = (*SAFE_FIELDS, "age-band")
_GROUP_ALIASES = {name.lower().replace("-", "").replace("_", ""): name for name in GROUP_FIELDS}
_GROUP_ALIASES.update({"age": "age-band", "model": "ManufacturerModelName", "scanner": "ManufacturerModelName",
                       "sex": "PatientSex", "bodypart": "BodyPartExamined"})


def parse_group_by(text: Optional[str]) -> tuple[str, ...]:
    """``Manufacturer,BodyPartExamined,age-band`` (any case; ``age``, ``sex``, ``model`` accepted) → field names."""
    fields = []
    for part in (text or "").split(","):
        key = part.strip().lower().replace("-", "").replace("_", "")
        if not key:
            continue
        if key not in _GROUP_ALIASES:
            raise OptionValueError(f"{argument('group_by')}: unknown field {part.strip()!r}; choose from "
                                   f"{', '.join(GROUP_FIELDS)}")
        fields.append(_GROUP_ALIASES[key])
    return tuple(dict.fromkeys(fields))


@dataclass
class AuditOptions:
    """Everything about an audit except the model and the method."""

    window: Optional[tuple[float, float]] = None
    """(width, level) applied to every grey DICOM instead of its own VOI."""
    frame: Optional[int] = None
    """Only this frame of multi-frame files (from 0); all frames when None."""
    salt: Optional[str] = None
    """Salt of the case and study keys; None: a random salt for this run, kept nowhere."""
    keep_ids: bool = False
    """Put file paths and DICOM identifiers into the report (no longer de-identified)."""
    keep_burned_in_text: bool = False
    """Write images without searching them for burned-in text (for pixels already cleaned)."""
    trust_burned_in_header: bool = False
    """Do not search the pixels of images whose header says BurnedInAnnotation NO (headers can be wrong: their
    burned-in text is then written); ultrasound, secondary captures and PNG/TIFF inputs are searched all the same."""
    allow_recognizable_features: bool = False
    """Audit files whose header says RecognizableVisualFeatures YES (faces, surface renderings) instead of
    withholding them."""
    flag_threshold: float = 0.5
    """Flag an image when more than this fraction of its saliency lies outside the body."""
    metrics: MetricSettings = field(default_factory=MetricSettings)
    masks: MaskSource = field(default_factory=MaskSource)
    """Regions of interest."""
    body_masks: MaskSource = field(default_factory=MaskSource)
    """User body masks (replace the Otsu body mask where present)."""
    group_by: tuple[str, ...] = ("ManufacturerModelName",)
    batch_size: int = 8
    workers: int = 0
    """Decoding processes (0: decode in the main process)."""
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS
    """The largest PNG, JPEG, TIFF… input to decode (:func:`~vitroll.io.images.load_image`; None: any size); a larger
    one is a row with the reason. DICOM frames are not limited."""
    thumbnail_size: int = 192

    def __post_init__(self) -> None:
        if self.salt is None:
            self.salt = secrets.token_hex(16)
        elif not self.salt.strip():  # `--salt "$SALT"` with SALT unset
            raise OptionValueError(f"{argument('salt')} is empty, which leaves the case and study keys plain hashes of "
                                   "file paths and study UIDs (anyone can hash a list of names to find them); give a "
                                   "secret salt, or leave it out for a random one")
        if not 0 <= self.flag_threshold <= 1:
            raise OptionValueError(f"{argument('flag_threshold')} must lie in [0, 1]; got {self.flag_threshold}")


@dataclass
class AuditRow:
    """One image (one frame of a file), or one file not audited (no image to explain, withheld or unreadable)."""

    case: str
    """Salted key of the file (and frame): the row's anchor in the report."""
    study: str
    """Salted key of the StudyInstanceUID (else of the file path)."""
    input_number: Optional[int] = None
    """Position of the file in the input list, from 1 (:data:`INPUT_ORDER`): a label free of PHI."""
    frame: Optional[int] = None
    frames: Optional[range] = None
    """Of a row not audited that stands for a run of parts of a file streamed in parts (not the whole file): their
    frames; else None."""
    error: Optional[str] = None
    """Why the file gave no image: one sentence, without the file's path or name (unless ``keep_ids``)."""
    interrupted: bool = False
    """Not audited because the audit was interrupted (Ctrl-C) before it reached the file (or these frames)."""
    metadata: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    not_measured: dict[str, str] = field(default_factory=dict)
    """Metric name → why it is NaN by rule (not for lack of saliency), e.g. no body outline on ultrasound."""
    flagged: bool = False
    prediction: Optional[str] = None
    probability: Optional[float] = None
    size_hw: Optional[tuple[int, int]] = None
    overlay_file: Optional[str] = None
    """Path of the full-size overlay PNG relative to the report folder."""
    thumbnail: Optional[bytes] = None
    """Small PNG: overlay with the body outline (green), annotations (magenta), ROI (cyan) and peak (white)."""
    identifiers: dict[str, str] = field(default_factory=dict)
    """File path and DICOM identifiers, only with ``keep_ids``."""
    text_check: Optional[str] = None
    """Why the pixels were (or were not) searched for burned-in text."""
    text_regions: Optional[int] = None
    """Burned-in text regions filled in the written images; None when the pixels were not searched."""


@dataclass
class AuditItem:
    """What the audit's reader knows about a decoded frame, carried beside it through the batch stream."""

    row: AuditRow
    """The frame's row, its measurements still to be filled in."""
    text_mask: np.ndarray
    """(H, W) bool: burned-in text to fill in every image written (all False when not searched)."""
    colour: bool = False
    """A colour image (see :attr:`vitroll.io.dicom.DicomImage.colour`)."""


INPUT_ORDER = (
    "Files are numbered from 1 in this order: the inputs as given on the command line; a folder stands for every "
    "file below it (symbolic links to files included, links to folders not followed; names starting with '.' "
    "skipped), sorted by the path relative to that folder, character by character in Unicode code-point order — "
    "the order of `cd FOLDER && find . -not -xtype d -not -path '*/.*' | LC_ALL=C sort` on UTF-8 names. A file "
    "found twice keeps its first number; the report's own folder is skipped."
)
"""How :func:`vitroll.io.discovery.given_files` orders files, in words an auditor can reproduce with their own file
list."""
