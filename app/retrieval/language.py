"""Which writing system a text is in, by Unicode script ranges: what an embedding model can read."""

from __future__ import annotations

import bisect
import re
from collections import Counter

# (first code point, last code point, script). Letters only matter: digits, punctuation and
# symbols are shared by every script and say nothing about which one a text is written in.
_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x0041, 0x005A, "latin"),
    (0x0061, 0x007A, "latin"),
    (0x00C0, 0x024F, "latin"),  # Latin-1 letters, Latin Extended-A/B
    (0x0250, 0x02AF, "latin"),  # IPA extensions
    (0x0370, 0x03FF, "greek"),
    (0x0400, 0x052F, "cyrillic"),
    (0x0530, 0x058F, "armenian"),
    (0x0590, 0x05FF, "hebrew"),
    (0x0600, 0x06FF, "arabic"),
    (0x0700, 0x074F, "syriac"),
    (0x0750, 0x077F, "arabic"),  # Arabic supplement
    (0x0780, 0x07BF, "thaana"),
    (0x0900, 0x097F, "devanagari"),
    (0x0980, 0x09FF, "bengali"),
    (0x0A00, 0x0A7F, "gurmukhi"),
    (0x0A80, 0x0AFF, "gujarati"),
    (0x0B00, 0x0B7F, "oriya"),
    (0x0B80, 0x0BFF, "tamil"),
    (0x0C00, 0x0C7F, "telugu"),
    (0x0C80, 0x0CFF, "kannada"),
    (0x0D00, 0x0D7F, "malayalam"),
    (0x0D80, 0x0DFF, "sinhala"),
    (0x0E00, 0x0E7F, "thai"),
    (0x0E80, 0x0EFF, "lao"),
    (0x0F00, 0x0FFF, "tibetan"),
    (0x1000, 0x109F, "myanmar"),
    (0x10A0, 0x10FF, "georgian"),
    (0x1100, 0x11FF, "hangul"),
    (0x1200, 0x139F, "ethiopic"),
    (0x1780, 0x17FF, "khmer"),
    (0x1E00, 0x1EFF, "latin"),  # Latin Extended Additional (Vietnamese)
    (0x1F00, 0x1FFF, "greek"),
    (0x2C00, 0x2C5F, "glagolitic"),
    (0x2C60, 0x2C7F, "latin"),
    (0x2D80, 0x2DDF, "ethiopic"),
    (0x2DE0, 0x2DFF, "cyrillic"),
    (0x2E80, 0x2FDF, "han"),  # CJK radicals
    (0x3040, 0x309F, "hiragana"),
    (0x30A0, 0x30FF, "katakana"),
    (0x3100, 0x312F, "bopomofo"),
    (0x3130, 0x318F, "hangul"),
    (0x31F0, 0x31FF, "katakana"),
    (0x3400, 0x4DBF, "han"),
    (0x4E00, 0x9FFF, "han"),
    (0xA640, 0xA69F, "cyrillic"),
    (0xA720, 0xA7FF, "latin"),
    (0xAC00, 0xD7AF, "hangul"),
    (0xF900, 0xFAFF, "han"),
    (0xFB1D, 0xFB4F, "hebrew"),
    (0xFB50, 0xFDFF, "arabic"),  # presentation forms A
    (0xFE70, 0xFEFF, "arabic"),  # presentation forms B
    (0xFF21, 0xFF3A, "latin"),  # fullwidth
    (0xFF41, 0xFF5A, "latin"),
    (0xFF66, 0xFF9F, "katakana"),  # halfwidth
    (0xFFA0, 0xFFDC, "hangul"),
    (0x20000, 0x323AF, "han"),  # CJK extensions B–H
)
_STARTS = [start for start, _, _ in _RANGES]
_ASCII_LETTER = re.compile("[A-Za-z]")


def char_script(char: str) -> str | None:
    """The script of one letter, None for digits, punctuation, symbols and unlisted scripts."""
    if not char.isalpha():
        return None
    code = ord(char)
    index = bisect.bisect_right(_STARTS, code) - 1
    if index >= 0:
        start, end, script = _RANGES[index]
        if start <= code <= end:
            return script
    return None


def dominant_script(text: str) -> str | None:
    """The script most of the text's letters are written in; None when it has no letters.

    Ties go to the script whose first letter comes first, so the answer is deterministic.
    """
    if text.isascii():
        # The only ASCII letters are Latin ones; most queries take this path, which runs on every
        # search before the query embedding starts (a per-character loop cost ~0.1 ms).
        return "latin" if _ASCII_LETTER.search(text) else None
    counts: Counter[str] = Counter()
    for char in text:
        script = char_script(char)
        if script is not None:
            counts[script] += 1
    if not counts:
        return None
    best = max(counts.values())
    return next(script for script in counts if counts[script] == best)


def unreadable_script(text: str, scripts: frozenset[str] | None) -> str | None:
    """The text's script when a model reading only `scripts` cannot read it, else None.

    `scripts` None means the model reads every script; a text without letters (numbers, code
    punctuation) is readable by any model.
    """
    if scripts is None:
        return None
    script = dominant_script(text)
    return script if script is not None and script not in scripts else None
