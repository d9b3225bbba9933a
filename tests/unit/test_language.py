"""Script detection: which writing system a query or memory is in, and whether the embedder reads it."""

from __future__ import annotations

import pytest

from app.retrieval.language import dominant_script, unreadable_script

LATIN = frozenset({"latin"})


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("where did I park the car", "latin"),
        ("Où est la bibliothèque ? Ça dépend.", "latin"),
        ("ما هي عاصمة المملكة العربية السعودية", "arabic"),
        ("北京是中国的首都", "han"),
        ("Привет, как дела?", "cyrillic"),
        ("서울은 한국의 수도입니다", "hangul"),
        ("Καλημέρα κόσμε", "greek"),
        ("שלום עולם", "hebrew"),
        ("नमस्ते दुनिया", "devanagari"),
        # Mostly Arabic letters with a Latin product name: the Arabic majority decides.
        ("كيف أستخدم PostgreSQL مع بايثون", "arabic"),
        ("Paris est la capitale de la France 法国", "latin"),
        ("1234 + 5678 = ?", None),
        ("", None),
    ],
)
def test_dominant_script(text: str, script: str | None) -> None:
    assert dominant_script(text) == script


def test_a_model_reading_only_latin_cannot_read_arabic_or_chinese() -> None:
    assert unreadable_script("ما هي عاصمة فرنسا", LATIN) == "arabic"
    assert unreadable_script("法国的首都是哪里", LATIN) == "han"
    assert unreadable_script("capital of France", LATIN) is None
    assert unreadable_script("2024-05-01 #42", LATIN) is None  # no letters: nothing to misread
    assert unreadable_script("法国的首都是哪里", None) is None  # a model that reads every script
