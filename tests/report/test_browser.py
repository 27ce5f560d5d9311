"""The report page in a real browser: headless Chromium (Debian's package) driven by Playwright.

Asserts what a person opening the file would see: every image decoded, no console error, every
section heading there, nothing fetched from outside the file, and a screenshot that is not blank.
Skipped, with the reason, only where no Chromium can be found (``make install`` installs Debian's
``chromium`` where apt-get runs as root).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from lenpred.report.page.sections import TITLES


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium found (Debian: `apt-get install chromium`, which `make install` runs as root)")


def test_page_renders_in_chromium(full_page: Path, tmp_path: Path) -> None:
    from matplotlib.image import imread
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    outside: list[str] = []
    with sync_playwright() as pw:
        # --no-sandbox: Chromium's sandbox refuses to start as root (CI runs as root)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else outside.append(r.url))
            page.goto(full_page.as_uri(), wait_until="load", timeout=60_000)
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => ({complete: e.complete, w: e.naturalWidth, h: e.naturalHeight}))")
            headings = page.eval_on_selector_all("section > h2", "els => els.map(e => e.textContent.trim())")
            shot = page.screenshot(full_page=False)
        finally:
            browser.close()
    (tmp_path / "report.png").write_bytes(shot)
    assert len(images) == 13
    assert all(i["complete"] and i["w"] > 0 and i["h"] > 0 for i in images), images
    assert errors == []
    assert outside == []
    assert headings == list(TITLES.values())
    pixels = imread(io.BytesIO(shot))  # (H, W, 3 or 4) floats in [0, 1]
    ink = (pixels[..., :3].min(axis=-1) < 0.8).mean()  # share of pixels that are not (near) white
    assert pixels.shape[0] == 1000 and 0.01 < ink < 0.9, ink
