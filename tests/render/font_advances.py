"""How wide a viewer draws a line of text: the advance widths of the font this machine gives for a
font family (fontconfig's `fc-match`, as browsers and graphviz ask it), read from the TrueType file
itself (the OpenType spec's head, hhea, hmtx and cmap format 4 tables) without hinting, as a
browser lays text out. Kerning is left out: in these fonts it only narrows pairs.

graphviz measures the same text through pango with hinted metrics and lays out to those; this is
the independent measure a test holds its layout to.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class Font:
    path: Path
    units_per_em: int
    advances: tuple[int, ...]  # per glyph id, in font units
    glyph_of: dict[int, int]  # code point -> glyph id (the BMP, cmap format 4)

    def width(self, text: str, size: float) -> float:
        """The drawn width of text at size (in the SVG's user units); unmapped characters draw as glyph 0."""
        last = self.advances[-1]
        units = sum(self.advances[g] if g < len(self.advances) else last
                    for g in (self.glyph_of.get(ord(c), 0) for c in text))
        return units * size / self.units_per_em


def _tables(data: bytes) -> dict[bytes, bytes]:
    (count,) = struct.unpack_from(">H", data, 4)
    out = {}
    for i in range(count):
        tag, _checksum, offset, length = struct.unpack_from(">4sIII", data, 12 + 16 * i)
        out[tag] = data[offset:offset + length]
    return out


def _cmap_format4(cmap: bytes) -> dict[int, int]:
    (_version, count) = struct.unpack_from(">HH", cmap, 0)
    for i in range(count):
        platform, encoding, offset = struct.unpack_from(">HHI", cmap, 4 + 8 * i)
        if (platform, encoding) in ((3, 1), (0, 3)) and struct.unpack_from(">H", cmap, offset)[0] == 4:
            break
    else:
        raise AssertionError("the font has no Unicode BMP cmap (format 4) subtable")
    (segments2,) = struct.unpack_from(">H", cmap, offset + 6)
    n = segments2 // 2
    ends = struct.unpack_from(f">{n}H", cmap, offset + 14)
    starts = struct.unpack_from(f">{n}H", cmap, offset + 16 + segments2)
    deltas = struct.unpack_from(f">{n}h", cmap, offset + 16 + 2 * segments2)
    range_at = offset + 16 + 3 * segments2
    ranges = struct.unpack_from(f">{n}H", cmap, range_at)
    glyph_of = {}
    for seg in range(n):
        for code in range(starts[seg], ends[seg] + 1):
            if code == 0xFFFF:
                continue
            if ranges[seg] == 0:
                glyph = (code + deltas[seg]) & 0xFFFF
            else:  # glyph index array: idRangeOffset is relative to its own slot
                at = range_at + 2 * seg + ranges[seg] + 2 * (code - starts[seg])
                (glyph,) = struct.unpack_from(">H", cmap, at)
                glyph = (glyph + deltas[seg]) & 0xFFFF if glyph else 0
            glyph_of[code] = glyph
    return glyph_of


@cache
def font_for(family: str) -> Font:
    """The font file fontconfig draws family with on this machine, with its advance widths."""
    fc_match = shutil.which("fc-match")
    assert fc_match, "fontconfig's fc-match is not on PATH (graphviz's pango needs fontconfig)"
    path = Path(subprocess.run([fc_match, "-f", "%{file}", family], capture_output=True, text=True,
                               timeout=30, check=True).stdout)
    data = path.read_bytes()
    # TrueType or OpenType with CFF outlines: both carry head, hhea, hmtx and cmap (not a collection).
    assert data[:4] in (b"\x00\x01\x00\x00", b"true", b"OTTO"), f"{path} is not a TrueType or OpenType font"
    tables = _tables(data)
    (units_per_em,) = struct.unpack_from(">H", tables[b"head"], 18)
    (metrics,) = struct.unpack_from(">H", tables[b"hhea"], 34)
    advances = tuple(struct.unpack_from(">H", tables[b"hmtx"], 4 * i)[0] for i in range(metrics))
    return Font(path, units_per_em, advances, _cmap_format4(tables[b"cmap"]))
