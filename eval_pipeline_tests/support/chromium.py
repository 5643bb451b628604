"""Debian's headless Chromium, as the tests render pages in it, and the PNGs it writes, decoded."""

import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        if os.environ.get("CI"):
            pytest.fail("CI must provide Debian's chromium (see .ci/run)")
        pytest.skip("no chromium installed")
    return found


def png_pixels(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Width, height and RGB pixels of an 8-bit RGB or RGBA PNG (what Chromium writes), decoded by hand."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    while offset < len(data):
        (length,), kind = struct.unpack(">I", data[offset : offset + 4]), data[offset + 4 : offset + 8]
        chunks.setdefault(kind, []).append(data[offset + 8 : offset + 8 + length])
        offset += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][0][:10])
    assert depth == 8 and colour in (2, 6)
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks[b"IDAT"])), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                paeth = min(
                    (abs(estimate - left), 0, left), (abs(estimate - up), 1, up), (abs(estimate - corner), 2, corner)
                )
                line[i] = (line[i] + paeth[2]) & 0xFF
        rows.append(line)
        previous = line
    pixels = [tuple(row[x * channels : x * channels + 3]) for row in rows for x in range(width)]
    return width, height, pixels
