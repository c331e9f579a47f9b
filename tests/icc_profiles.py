"""ICC profiles built by hand (Display P3 matrix/TRC, a CMYK table; ICC v2) and the colour maths a test checks LittleCMS
with."""

from __future__ import annotations

import struct

import numpy as np

D50 = np.array([0.9642, 1.0, 0.8249])
_BRADFORD = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367], [0.0389, -0.0685, 1.0296]])
_D65 = np.array([0.95047, 1.0, 1.08883])

P3_PRIMARIES = ((0.680, 0.320), (0.265, 0.690), (0.150, 0.060))
SRGB_PRIMARIES = ((0.640, 0.330), (0.300, 0.600), (0.150, 0.060))


def rgb_to_xyz_d50(primaries: tuple[tuple[float, float], ...]) -> np.ndarray:
    """(3, 3) linear RGB → XYZ (D50, Bradford-adapted from D65) of an RGB space with a D65 white: the colorant
    columns an ICC profile stores."""
    xyz = np.array([[x / y, 1.0, (1 - x - y) / y] for x, y in primaries]).T
    scaled = xyz * np.linalg.solve(xyz, _D65)
    adapt = np.linalg.inv(_BRADFORD) @ np.diag((_BRADFORD @ D50) / (_BRADFORD @ _D65)) @ _BRADFORD
    return adapt @ scaled


def srgb_decode(values: np.ndarray) -> np.ndarray:
    """sRGB-encoded values in [0, 1] → linear light (IEC 61966-2-1; Display P3 uses the same curve)."""
    return np.where(values <= 0.04045, values / 12.92, ((values + 0.055) / 1.055) ** 2.4)


def srgb_encode(linear: np.ndarray) -> np.ndarray:
    linear = np.clip(linear, 0.0, 1.0)
    return np.where(linear <= 0.0031308, linear * 12.92, 1.055 * linear ** (1 / 2.4) - 0.055)


def p3_to_srgb(rgb: tuple[int, int, int]) -> np.ndarray:
    """An 8-bit Display P3 colour as float sRGB 0–255 (relative colorimetric: both D65, clipped to sRGB)."""
    linear = srgb_decode(np.asarray(rgb, dtype=np.float64) / 255.0)
    srgb_linear = np.linalg.solve(rgb_to_xyz_d50(SRGB_PRIMARIES), rgb_to_xyz_d50(P3_PRIMARIES) @ linear)
    return srgb_encode(srgb_linear) * 255.0


def _s15(value: float) -> bytes:
    return struct.pack(">i", round(value * 65536))


def _xyz_tag(xyz: np.ndarray) -> bytes:
    return b"XYZ " + bytes(4) + b"".join(_s15(v) for v in xyz)


def _curve_tag(points: int = 1024) -> bytes:
    table = np.round(srgb_decode(np.linspace(0.0, 1.0, points)) * 65535).astype(">u2")
    return b"curv" + bytes(4) + struct.pack(">I", points) + table.tobytes()


def _desc_tag(text: str) -> bytes:
    ascii_text = text.encode("ascii") + b"\0"
    return (b"desc" + bytes(4) + struct.pack(">I", len(ascii_text)) + ascii_text
            + bytes(4) + bytes(4) + bytes(2) + bytes(1) + bytes(67))


def display_p3_profile(description: str = "Display P3 (vitroll test)") -> bytes:
    """A matrix/TRC ICC v2 display profile: Display P3 primaries, D65 white adapted to D50, the sRGB curve."""
    colorants = rgb_to_xyz_d50(P3_PRIMARIES)
    curve = _curve_tag()
    return _profile(b"mntrRGB XYZ ", [
        (b"desc", _desc_tag(description)), (b"wtpt", _xyz_tag(D50)), (b"rXYZ", _xyz_tag(colorants[:, 0])),
        (b"gXYZ", _xyz_tag(colorants[:, 1])), (b"bXYZ", _xyz_tag(colorants[:, 2])),
        (b"rTRC", curve), (b"gTRC", curve), (b"bTRC", curve), (b"cprt", b"text" + bytes(4) + b"none\0")])


def linear_grey_profile() -> bytes:
    """A grey display profile whose values are linear light (gamma 1): grey 128 is sRGB's 188."""
    gamma_one = b"curv" + bytes(4) + struct.pack(">I", 0)  # no entries: the identity
    return _profile(b"mntrGRAYXYZ ", [(b"desc", _desc_tag("Linear grey (vitroll test)")), (b"wtpt", _xyz_tag(D50)),
                                     (b"kTRC", gamma_one), (b"cprt", b"text" + bytes(4) + b"none\0")])


def printed_srgb(cmyk: tuple[int, int, int, int]) -> np.ndarray:
    """The sRGB colour 0–255 (float) that :func:`cmyk_profile` gives a CMYK corner (each ink 0 or 255): Pillow's
    plain conversion, muted toward grey as ink on paper is (black ink 51, not 0)."""
    c, m, y, k = (value / 255.0 for value in cmyk)
    return (0.2 + 0.8 * np.array([(1 - c) * (1 - k), (1 - m) * (1 - k), (1 - y) * (1 - k)])) * 255.0


def _lab_d50(srgb: np.ndarray) -> np.ndarray:
    xyz = rgb_to_xyz_d50(SRGB_PRIMARIES) @ srgb_decode(srgb / 255.0) / D50
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def cmyk_profile(description: str = "Printed CMYK (vitroll test)") -> bytes:
    """An ICC v2 output profile for CMYK: an 8-bit 2×2×2×2 table (A2B0, CMYK → Lab) whose corners are
    :func:`printed_srgb`; between them LittleCMS interpolates."""
    corners = [(c, m, y, k) for c in (0, 255) for m in (0, 255) for y in (0, 255) for k in (0, 255)]
    clut = b"".join(bytes(int(round(v)) for v in np.clip((lab[0] * 255 / 100, lab[1] + 128, lab[2] + 128), 0, 255))
                    for lab in (_lab_d50(printed_srgb(corner)) for corner in corners))
    identity = bytes(range(256))
    matrix = b"".join(_s15(v) for v in np.eye(3).ravel())
    lut = b"mft1" + bytes(4) + bytes([4, 3, 2, 0]) + matrix + identity * 4 + clut + identity * 3
    return _profile(b"prtrCMYKLab ", [(b"desc", _desc_tag(description)), (b"wtpt", _xyz_tag(D50)),
                                     (b"A2B0", lut), (b"cprt", b"text" + bytes(4) + b"none\0")])


def _profile(class_and_spaces: bytes, tags: list[tuple[bytes, bytes]]) -> bytes:
    """An ICC v2 profile of ``tags`` (signature, body); ``class_and_spaces``: device class, colour space, PCS."""
    table_size = 4 + 12 * len(tags)
    offset, entries, data = 128 + table_size, b"", b""
    for signature, body in tags:
        body += bytes(-len(body) % 4)
        entries += signature + struct.pack(">II", offset + len(data), len(body))
        data += body
    size = 128 + table_size + len(data)
    header = (struct.pack(">I", size) + b"lcms" + struct.pack(">I", 0x02100000) + class_and_spaces
              + struct.pack(">6H", 2026, 1, 1, 0, 0, 0) + b"acsp" + b"APPL" + bytes(4) + bytes(4) + bytes(4)
              + bytes(8) + struct.pack(">I", 0) + b"".join(_s15(v) for v in D50) + b"lcms" + bytes(16) + bytes(28))
    assert len(header) == 128
    return header + struct.pack(">I", len(tags)) + entries + data
