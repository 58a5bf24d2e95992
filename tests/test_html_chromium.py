"""The HTML report in headless Chromium: scripts run without errors and the page is not blank.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); skipped without it unless
``TRACESCALE_REQUIRE_ALL=1`` (CI). ``TRACESCALE_WRITE_SCREENSHOT=1`` keeps the screenshot as
``docs/report.png`` for the README.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np

from tests.headless import Browser
from tracescale.comparison import compare_docs
from tracescale.report import render, render_compare

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "study_strong.json"


def decode_png(data: bytes) -> np.ndarray:
    """8-bit RGB/RGBA (non-interlaced) PNG -> (height, width, channels) array; no Pillow."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
    bpp = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.int32)
    for y in range(height):
        ftype, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if ftype == 0:
            cur = line
        elif ftype == 2:
            cur = (line + prev) & 0xFF
        elif ftype == 1:
            cur = line.reshape(width, bpp).cumsum(axis=0).reshape(-1) & 0xFF
        else:
            up, rowv = prev.tolist(), line.tolist()
            res = [0] * len(rowv)
            for i, v in enumerate(rowv):
                a = res[i - bpp] if i >= bpp else 0
                b = up[i]
                if ftype == 3:
                    res[i] = (v + ((a + b) >> 1)) & 0xFF
                else:
                    c = up[i - bpp] if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                    res[i] = (v + pred) & 0xFF
            cur = np.asarray(res, dtype=np.int32)
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)


def _check_page(browser: Browser, page: Path) -> str:
    """Load the page, let scripts run, return the DOM; fail on console errors."""
    loaded = browser.load(page, 800, 600)
    errors = [
        line
        for line in loaded.uncaught + loaded.console
        if "Uncaught" in line or ("CONSOLE" in line and "error" in line.lower())
    ]
    assert not errors, errors
    assert 'id="ts-error"' not in loaded.dom
    assert 'id="ts-ok"' in loaded.dom, "the chart script did not finish"
    return loaded.dom


def _screenshot(browser: Browser, page: Path, width: int, height: int, shot: Path) -> bytes:
    """A PNG of the page at ``width`` x ``height`` px, also kept as ``shot``."""
    png = browser.load(page, width, height, screenshot=True).png
    assert png is not None
    shot.write_bytes(png)
    return png


def test_study_report_loads_without_errors_and_is_not_blank(
    browser: Browser, tmp_path: Path
) -> None:
    doc = json.loads(FIXTURE.read_text())
    page = tmp_path / "report.html"
    page.write_text(render(doc, "html"), encoding="utf-8")
    dom = _check_page(browser, page)
    assert dom.count("<svg") >= 7, "speedup, stacked, serial, interval and per-rank charts"
    assert "Amdahl ceiling" in dom and "straggler" in dom

    pixels = decode_png(_screenshot(browser, page, 1200, 2000, tmp_path / "report.png"))
    assert pixels.shape[:2] == (2000, 1200)
    rgb = pixels[:, :, :3].astype(float)
    assert rgb.std() > 20, "screenshot is blank"
    colours = {tuple(p) for p in pixels[::10, ::10, :3].reshape(-1, 3).tolist()}
    assert len(colours) > 50, "screenshot has too few colours to hold charts"


def test_compare_report_loads_without_errors(browser: Browser, tmp_path: Path) -> None:
    before = json.loads(FIXTURE.read_text())
    after = json.loads(FIXTURE.read_text())
    for run in after["studies"][0]["runs"]:
        run["breakdown_s"]["dataloader"] -= 0.04
    page = tmp_path / "compare.html"
    page.write_text(render_compare(compare_docs(before, after), "html"), encoding="utf-8")
    dom = _check_page(browser, page)
    assert "before and after" in dom


def test_png_decoder_on_a_known_image() -> None:
    rows = b"\x00" + bytes([0, 0, 255, 60, 0, 195]) + b"\x02" + bytes([1, 1, 1, 1, 1, 1])
    rows += b"\x01" + bytes([5, 6, 7, 1, 1, 1])  # Sub: each byte adds the pixel to its left
    rows += b"\x03" + bytes([2, 2, 2, 2, 2, 2])  # Average of left and up
    rows += b"\x04" + bytes([0, 0, 0, 0, 0, 0])  # Paeth: predicts from left/up/up-left
    body = struct.pack(">IIBBBBB", 2, 5, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", body) + chunk(b"IDAT", zlib.compress(rows))
    png += chunk(b"IEND", b"")
    img = decode_png(png)
    assert img[0].tolist() == [[0, 0, 255], [60, 0, 195]]
    assert img[1].tolist() == [[1, 1, 0], [61, 1, 196]]
    assert img[2].tolist() == [[5, 6, 7], [6, 7, 8]]
    assert img[3].tolist() == [[4, 5, 5], [7, 8, 8]]
    assert img[4].tolist() == [[4, 5, 5], [7, 8, 8]]


def test_real_sample_study_report(browser: Browser, tmp_path: Path, analyzed_doc) -> None:
    """The demo study's own report (the README's screenshot comes from here); its document is
    the session's analysis of the shipped study (conftest's analyzed_doc, also drawn by the
    layout tests)."""
    doc = analyzed_doc(ROOT / "sample_traces" / "sim_gpu_strong")
    page = tmp_path / "sample.html"
    page.write_text(render(doc, "html"), encoding="utf-8")
    assert page.stat().st_size < 5 * 1024 * 1024
    dom = _check_page(browser, page)
    assert dom.count("<svg") >= 5
    shot = tmp_path / "sample.png"
    pixels = decode_png(_screenshot(browser, page, 1200, 2400, shot))
    assert pixels[:, :, :3].astype(float).std() > 20
    if os.environ.get("TRACESCALE_WRITE_SCREENSHOT") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copyfile(shot, ROOT / "docs" / "report.png")
