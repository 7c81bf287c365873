"""The username rules (det.master.services.usernames): one key per name up to case and width,
one script per name, and lookalikes read as the Latin letters they imitate."""

from __future__ import annotations

import pytest

from det.master.services import usernames


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("alice", "ALICE"),
        ("alice", "Alice"),
        ("admin", "\uff41\uff44\uff4d\uff49\uff4e"),  # full-width
        ("strasse", "STRASSE"),
        ("stra\u00dfe", "STRASSE"),  # the sharp s folds to ss
        ("\u0434\u0438\u043c\u0430", "\u0414\u0418\u041c\u0410"),  # Cyrillic, both cases
    ],
)
def test_names_differing_in_case_or_width_share_a_key(a: str, b: str) -> None:
    assert usernames.key(a) == usernames.key(b)


def test_normalize_keeps_case_and_folds_width() -> None:
    assert usernames.normalize("\uff21lice") == "Alice"


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("admin", False),
        ("bob.smith-2@example", False),
        ("\u0434\u0438\u043c\u0430", False),  # all Cyrillic
        ("\u5c71\u7530\u305f\u308d\u3046", False),  # Han + Hiragana
        ("taro\u5c71\u7530", False),  # Latin + Han
        ("\uae40\ucca0\uc218", False),  # Hangul
        ("\u0430dmin", True),  # a Cyrillic a among Latin letters
        ("\u03b1lice", True),  # a Greek alpha
        ("admin\u0660", True),  # an Arabic-Indic digit
        ("\u0434\u0438\u043c\u0430\u03b1", True),  # Cyrillic with Greek
    ],
)
def test_one_script_per_name(name: str, refused: bool) -> None:
    assert (usernames.check_script(name) is not None) == refused


@pytest.mark.parametrize(
    ("lookalike", "original"),
    [
        ("\u0430\u0441\u0435", "ace"),  # Cyrillic
        ("\u0410\u0421\u0415", "ace"),  # Cyrillic capitals
        ("\u03bf\u03c1\u03b1", "opa"),  # Greek
        ("\u0131d", "id"),  # dotless i
    ],
)
def test_lookalikes_share_a_skeleton(lookalike: str, original: str) -> None:
    assert usernames.key(lookalike) != usernames.key(original)
    assert usernames.skeleton(lookalike) == usernames.skeleton(original)


def test_digits_are_not_read_as_letters() -> None:
    assert usernames.skeleton("bob1") != usernames.skeleton("bobl")
    assert usernames.skeleton("r00t") != usernames.skeleton("root")
