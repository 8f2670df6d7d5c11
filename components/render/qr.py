"""A QR code of a link, drawn here (``segno``: pure Python, no network, no image library) as an ``<img>`` whose
source is the SVG itself, so the page shows it without any file or request."""
from __future__ import annotations

import html

import segno


def qr_img(link: str, alt: str, px: int = 220) -> str:
    """``<img>`` HTML of a QR code of ``link`` (error correction M, the quiet zone kept), ``px`` wide."""
    uri = segno.make(link, error="m", micro=False).svg_data_uri(scale=4, border=4, dark="#000", light="#fff",
                                                                omitsize=True)
    return (f'<img class="sd-class-qr" src="{html.escape(uri)}" width="{px}" height="{px}" '
            f'alt="{html.escape(alt)}">')


__all__ = ["qr_img"]
