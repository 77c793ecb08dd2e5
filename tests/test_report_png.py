"""The report's PNGs: the sizes the figures were drawn at, and real content in each (many
colours, ink neither absent nor everywhere, coloured data series, no two figures alike)."""

from __future__ import annotations

import hashlib

import pytest

pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")
np = pytest.importorskip("numpy")

from test_report_build import shared_report  # noqa: E402
from trainperf.report.plots import DPI  # noqa: E402

# figure kind -> expected (width, height) in pixels: inches x DPI, as drawn in plots.py
EXPECTED = {
    "timeline": (8.0 * DPI, (1.2 + 1.55 * 3) * DPI),  # step time, tokens/s, MFU panels
    "loss": (6.0 * DPI, 3.4 * DPI),
    "memory": (6.0 * DPI, 3.4 * DPI),
    "sweep": (10.0 * DPI, 4.2 * DPI),
    "comparison": (10.0 * DPI, (1.4 + 0.55 * 4) * DPI),  # 3 runs + 1 published row
    "predicted-vs-measured": (10.0 * DPI, (1.6 + 0.62 * 3) * DPI),
    "runs-overlaid": (11.0 * DPI, (1.4 + 2.6 * 2) * DPI),  # 4 panels in 2 rows
}


def _kind(name: str) -> str:
    """``run01-x-timeline.png`` -> ``timeline``; ``sweep01.png`` -> ``sweep``."""
    for prefix in ("sweep", "comparison", "predicted-vs-measured", "runs-overlaid"):
        if name.startswith(prefix):
            return prefix
    return name.removesuffix(".png").rsplit("-", 1)[1]


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    rep, _ = shared_report(tmp_path_factory)
    return [f.path for f in rep.figures]


def test_every_png_has_its_drawn_size(pngs):
    kinds = [_kind(p.name) for p in pngs]
    assert set(kinds) >= {"timeline", "loss", "memory", "sweep", "comparison"}
    for p, kind in zip(pngs, kinds, strict=True):
        with Image.open(p) as im:
            assert im.format == "PNG"
            w, h = im.size
        ew, eh = EXPECTED[kind]
        assert abs(w - ew) <= 1 and abs(h - eh) <= 1, (p.name, im.size, (ew, eh))
        assert 5_000 < p.stat().st_size < 1_000_000, (p.name, p.stat().st_size)


def test_every_png_has_non_trivial_content(pngs):
    digests = set()
    for p in pngs:
        with Image.open(p) as im:
            rgb = np.asarray(im.convert("RGB"), dtype=np.int32)
        flat = rgb.reshape(-1, 3)
        colours = len(np.unique((flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]))
        ink = float((flat.min(axis=1) < 235).mean())  # pixels that are not (near) white
        chroma = flat.max(axis=1) - flat.min(axis=1)
        coloured = float((chroma > 60).mean())  # data series are drawn in colour, text in grey
        assert colours >= 50, (p.name, colours)
        assert 0.02 < ink < 0.8, (p.name, ink)
        assert coloured > 0.002, (p.name, coloured)
        digests.add(hashlib.sha256(p.read_bytes()).hexdigest())
    assert len(digests) == len(pngs)  # no figure is a copy of another
