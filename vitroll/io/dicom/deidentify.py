"""Which DICOM header values may be shown: a whitelist of non-identifying fields (:data:`SAFE_FIELDS`), each
withheld where it repeats an identifying value of the file (DICOM PS3.15 Annex E), an age band, and salted keys."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from pydicom import Dataset

SAFE_FIELDS = ("Manufacturer", "ManufacturerModelName", "BodyPartExamined", "Modality", "PatientSex",
               "BurnedInAnnotation")
"""Header fields copied into reports: none names, identifies or dates a patient, a study or an institution."""

UNKNOWN = "unknown"

def age_band(patient_age: object) -> str:
    """DICOM age string (``045Y``, ``006M``, ``003W``, ``002D``) → decade band ``40-49``; 90 and over → ``90+``."""
    match = re.fullmatch(r"\s*(\d{1,3})\s*([YMWD]?)\s*", str(patient_age or ""))
    if not match:
        return UNKNOWN
    years = int(match.group(1)) if match.group(2) in ("Y", "") else 0
    if years >= 90:
        return "90+"
    low = years // 10 * 10
    return f"{low}-{low + 9}"


def salted_key(salt: str, value: str, length: int = 12) -> str:
    """``sha256(salt + value)`` in hex, first ``length`` characters."""
    return hashlib.sha256((salt + value).encode("utf-8")).hexdigest()[:length]


def _clean(value: object) -> str:
    text = " ".join(str(value).split()) if value is not None else ""
    text = "".join(ch for ch in text if ch.isprintable())[:64]
    return text or UNKNOWN


WITHHELD = "(withheld)"
"""Shown for a whitelisted field whose value looks like a person name or holds one of the file's identifying values
(:func:`safe_metadata` gives the rule)."""

IDENTIFIER_KEYWORDS = frozenset({
    "PatientID", "OtherPatientIDs", "IssuerOfPatientID", "AccessionNumber", "StudyID", "AdmissionID",
    "IssuerOfAdmissionID", "ServiceEpisodeID", "RequestedProcedureID", "PerformedProcedureStepID",
    "ScheduledProcedureStepID", "PlacerOrderNumberImagingServiceRequest", "FillerOrderNumberImagingServiceRequest",
    "MedicalRecordLocator", "InsurancePlanIdentification", "DeviceSerialNumber", "DetectorID", "PlateID", "CassetteID",
    "GantryID", "PatientTelephoneNumbers", "PatientTelecomInformation", "PatientAddress",
    "ReferringPhysicianTelephoneNumbers", "ReferringPhysicianAddress", "PersonTelephoneNumbers", "PersonAddress",
    "MilitaryRank", "BranchOfService",
})
"""DICOM PS3.15 Annex E attributes that hold IDs, numbers and addresses (beside the person names, dates and UIDs
found by their value representation): their whole values and their words of :data:`MIN_WORD` characters or more
are looked for."""

SITE_KEYWORDS = frozenset({
    "InstitutionName", "InstitutionAddress", "InstitutionalDepartmentName", "StationName", "RegionOfResidence",
    "CountryOfResidence", "CurrentPatientLocation", "PatientInstitutionResidence", "RequestingService",
})
"""Annex E attributes naming a place: looked for whole, not word by word (a hospital's "General" or "Medical" is
also a maker's word)."""

DESCRIPTION_KEYWORDS = frozenset({
    "StudyDescription", "SeriesDescription", "RequestedProcedureDescription", "PerformedProcedureStepDescription",
    "ScheduledProcedureStepDescription", "ProtocolName", "AdmittingDiagnosesDescription", "DerivationDescription",
    "DischargeDiagnosisDescription", "ReasonForStudy", "ReasonForTheRequestedProcedure", "RequestedContrastAgent",
    "Occupation", "MedicalAlerts", "Allergies", "PatientState", "AcquisitionComments", "ImageComments",
    "FrameComments", "StudyComments", "VisitComments", "PatientComments", "AdditionalPatientHistory",
    "RequestedProcedureComments", "ImagingServiceRequestComments", "CommentsOnThePerformedProcedureStep",
    "InterpretationText", "TextComments", "TopicTitle", "TopicSubject", "TopicKeywords",
})
"""Annex E free-text attributes: a name may be typed into them ("CT for DOE JOHN"), beside words a shown field
legitimately shares (CHEST), so only runs of :data:`DESCRIPTION_RUN` of their words are looked for. Other text
(coding schemes' descriptions, a maker's private XML) is not: it names the maker and would withhold its name."""

_LOOKED_FOR_KEYWORDS = IDENTIFIER_KEYWORDS | SITE_KEYWORDS | DESCRIPTION_KEYWORDS

SKIPPED_SEQUENCES = frozenset({"PerFrameFunctionalGroupsSequence"})
"""Sequences not searched: one item per frame of an enhanced multi-frame file, geometry and timing, no identifiers."""

MIN_WORD = 3
"""Shortest word of a person name or an ID looked for on its own: shorter ones (``Mr``, ``MR``, initials) would
withhold modalities and sexes that merely look alike."""

DESCRIPTION_RUN = 2
"""Consecutive words of a free-text field that a shown value must repeat to be withheld."""


def _items(value: object) -> list[object]:
    """The values of a (possibly multi-valued) element value; none for None."""
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return list(value)
    return [value] if value is not None else []


def _values(value: object) -> list[str]:
    """The strings of a (possibly multi-valued) element value."""
    return [str(item) for item in _items(value)]


PLAIN_LETTERS = str.maketrans({"ø": "o", "ł": "l", "ı": "i", "đ": "d", "ð": "d", "ħ": "h", "ŧ": "t", "þ": "th",
                               "æ": "ae", "œ": "oe"})
"""Letters (case-folded) that Unicode does not decompose into a plain letter and a mark, as a field of plain ASCII
spells them: Søren is SOREN, Łukasz LUKASZ, Yıldız YILDIZ, Đorđević DORDEVIC, Guðrún GUDRUN, Bækgaard BAEKGAARD."""


def _words(text: str) -> tuple[str, ...]:
    """Case-folded runs of letters, digits and the vowel signs between them, of any script, without accents: ``^``,
    ``_``, ``-``, ``.`` and spaces all separate. A name typed into a field of plain ASCII (a CS value such as
    BodyPartExamined allows no other) loses its accents, so ``José`` and ``JOSE`` are one word, as are ``Søren`` and
    ``SOREN`` (:data:`PLAIN_LETTERS`)."""
    decomposed = unicodedata.normalize("NFKD", text.casefold().translate(PLAIN_LETTERS))
    # composed again: a Hangul syllable stays one character, not two or three jamo, for MIN_WORD
    bare = unicodedata.normalize("NFC", "".join(ch for ch in decomposed if not unicodedata.combining(ch)))
    # a mark left (a Devanagari, Tamil or Thai vowel sign) is inside its word: राम is one word, not र and म
    return tuple("".join(ch if ch.isalnum() or unicodedata.category(ch).startswith("M") else " "
                         for ch in bare).split())


SPELLED_OUT = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "ø": "oe", "å": "aa"})
"""How German, Danish and Norwegian names are also written in plain ASCII: Müller is MUELLER as often as MULLER,
Jørgensen JOERGENSEN, Åse AASE."""


def _spellings(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The words of ``text`` (:func:`_words`) with its accents dropped, and with :data:`SPELLED_OUT`'s letters
    spelled out: a name is found in a value that spells it either way."""
    return _words(text), _words(unicodedata.normalize("NFC", text.casefold()).translate(SPELLED_OUT))


@dataclass
class _Identifying:
    """What a shown value must not repeat: words (of names and IDs), whole values as word runs (IDs, dates, UIDs,
    places) and runs of :data:`DESCRIPTION_RUN` words of free text."""

    words: set[str] = field(default_factory=set)
    runs: set[tuple[str, ...]] = field(default_factory=set)

    def found_in(self, words: tuple[str, ...]) -> bool:
        if any(word in self.words for word in words):
            return True
        lengths = {len(run) for run in self.runs}
        return any(words[start:start + length] in self.runs
                   for length in lengths for start in range(len(words) - length + 1))


def _elements(dataset: "Dataset") -> Iterator[tuple[str, str, object]]:
    """(keyword, value representation, value) of the elements of ``dataset`` and of its sequences' items, at any
    depth, that may identify (:func:`_identifying`); pixel data and other deferred elements are never read."""
    from pydicom.datadict import dictionary_VR, keyword_for_tag
    from pydicom.dataelem import RawDataElement

    for tag in list(dataset.keys()):
        raw = dataset.get_item(tag, keep_deferred=True)
        if isinstance(raw, RawDataElement) and raw.value is None and raw.length:
            continue  # deferred: larger than PIXEL_DATA_DEFERRED, the pixel data
        keyword = keyword_for_tag(tag)
        try:
            vr = raw.VR or dictionary_VR(tag)
        except KeyError:  # a private element of implicit VR: what it holds cannot be told
            continue
        if vr == "SQ" and keyword not in SKIPPED_SEQUENCES:
            for item in dataset[tag].value or ():
                yield from _elements(item)
        elif vr in ("PN", "DA", "DT", "UI") or keyword in _LOOKED_FOR_KEYWORDS:
            try:
                value = dataset[tag].value
            except Exception:  # noqa: BLE001 — a value pydicom cannot convert is not shown either
                continue
            yield keyword, vr, value


def _full_names(value: object) -> set[tuple[str, ...]]:
    """The family and given names of each person name of ``value`` (and of each of its alphabetic, ideographic and
    phonetic groups, split at ``=``) as one run of words, in both spellings (:func:`_spellings`), where that run has
    two words or more: a name of short words (``Li^Na``) is looked for whole, its words being shorter than
    :data:`MIN_WORD`."""
    return {words for text in _values(value) for group in text.split("=")
            for words in _spellings(" ".join(group.split("^")[:2])) if len(words) > 1}


def _identifying(dataset: object) -> _Identifying:
    """The identifying values of ``dataset`` (a pydicom data set; anything else has none), by DICOM PS3.15 Annex E:

    * every person name (value representation PN, any keyword, in sequences too): its words of :data:`MIN_WORD`
      characters or more, and its family and given names as one run (:func:`_full_names`);
    * IDs, numbers and addresses (:data:`IDENTIFIER_KEYWORDS`): the whole value and its words of :data:`MIN_WORD` or
      more;
    * dates (DA, DT) and UIDs (UI): the whole value;
    * places (:data:`SITE_KEYWORDS`): the whole value, unless the Manufacturer value starts with it (a maker's own
      site: pydicom's MR_small.dcm has InstitutionName TOSHIBA and Manufacturer TOSHIBA_MEC);
    * free text (:data:`DESCRIPTION_KEYWORDS`): each run of :data:`DESCRIPTION_RUN` words;

    each in both of its spellings (:func:`_spellings`).
    """
    from pydicom import Dataset

    identifying = _Identifying()
    if not isinstance(dataset, Dataset):
        return identifying
    makers = _spellings(" ".join(_values(dataset.get("Manufacturer"))))
    for keyword, vr, value in _elements(dataset):
        if vr == "PN":
            identifying.runs.update(_full_names(value))
        for maker, words in (pair for text in _values(value) for pair in zip(makers, _spellings(text))):
            if not words:
                continue
            if vr == "PN" or keyword in IDENTIFIER_KEYWORDS:
                identifying.words.update(word for word in words if len(word) >= MIN_WORD)
            if keyword in SITE_KEYWORDS:
                if maker[:len(words)] != words:
                    identifying.runs.add(words)
            elif keyword in DESCRIPTION_KEYWORDS:
                identifying.runs.update(words[start:start + DESCRIPTION_RUN]
                                        for start in range(len(words) - DESCRIPTION_RUN + 1))
            elif vr != "PN":
                identifying.runs.add(words)
    return identifying


def _shown(value: object, identifying: _Identifying) -> str:
    """``value`` cleaned for a report, or :data:`WITHHELD` when it is shaped like a person name (``^``) or repeats an
    identifying value (:func:`_identifying`)."""
    text = " ".join(_values(value))
    if "^" in text or any(identifying.found_in(words) for words in _spellings(text)):
        return WITHHELD
    return _clean(value)


def safe_metadata(dataset: object) -> dict[str, str]:
    """The whitelisted fields of a pydicom dataset (or any object with attributes) and its age band.

    The values of identifying attributes (DICOM PS3.15 Annex E: names, IDs, dates, UIDs, places, free text) are never
    copied; a whitelisted field's value is :data:`WITHHELD` when it looks like a person name (``^``) or repeats one of
    them (:func:`_identifying`): a field typed by hand can hold anything.
    """
    identifying = _identifying(dataset)
    metadata = {name: _shown(getattr(dataset, name, None), identifying) for name in SAFE_FIELDS}
    metadata["age-band"] = age_band(getattr(dataset, "PatientAge", None))
    return metadata
