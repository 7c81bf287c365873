"""Usernames that cannot pass for one another (pure: no database).

Three rules, all from the Python standard library's Unicode data:

1. **One form, compared without case.** A username is stored in Unicode NFKC (``admin`` in
   full-width letters is stored as ``admin``) and two names are the same when their
   :func:`key` (NFKC, case-folded, NFKC again: Unicode's NFKC_Casefold, so ``ALICE``,
   ``Alice`` and ``alice`` share one) is the same. Logins find a user by its key.
2. **One script per name** (:func:`check_script`): the letters of a new name come from one
   script, or from one of the combinations a Japanese, Chinese or Korean name needs (Latin with
   Han and Hiragana/Katakana, with Han and Bopomofo, or with Han and Hangul): Unicode
   Technical Standard #39's "highly restrictive" level. ``admin`` written with a Cyrillic
   ``a`` (U+0430) among Latin letters is refused whatever names exist.
3. **No lookalike of an existing name** (:func:`skeleton`): a name written wholly in another
   script that reads as an existing one (``ace`` in Cyrillic letters beside the Latin
   ``ace``) is refused. UTS #39 defines skeletons with a confusables table the standard library does not ship; the
   table here covers the Cyrillic and Greek letters that look like Latin ones (the scripts
   whose letters overlap Latin's shapes), and a few Latin variants (the dotless i). Digits
   that look like letters (``0``/``o``, ``1``/``l``) are deliberately not folded: they would
   refuse ordinary names such as ``bob1`` beside ``bobl``.

The rules apply when a name is created or changed; names stored before them keep working.
"""

from __future__ import annotations

import unicodedata

# UTS #39 "highly restrictive": a single script, or a subset of one of these.
_ALLOWED_MIXES = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
# The first word of a character's Unicode name that is not its script's name.
_SCRIPT_ALIASES = {
    "CJK": "HAN",
    "KATAKANA-HIRAGANA": "KATAKANA",
    "ARABIC-INDIC": "ARABIC",
    "EXTENDED": "ARABIC",
}

# Lowercase (case-folded) letters of other scripts, and Latin variants, that read as a Latin
# letter in either case.
_LOOKALIKES = {
    # Cyrillic
    "\u0430": "a",  # cyrillic small letter a
    "\u0432": "b",  # cyrillic small letter ve
    "\u0434": "d",  # cyrillic small letter de
    "\u0435": "e",  # cyrillic small letter ie
    "\u0451": "e",  # cyrillic small letter io
    "\u043a": "k",  # cyrillic small letter ka
    "\u043c": "m",  # cyrillic small letter em
    "\u043d": "h",  # cyrillic small letter en
    "\u043e": "o",  # cyrillic small letter o
    "\u043f": "n",  # cyrillic small letter pe
    "\u0440": "p",  # cyrillic small letter er
    "\u0441": "c",  # cyrillic small letter es
    "\u0442": "t",  # cyrillic small letter te
    "\u0443": "y",  # cyrillic small letter u
    "\u0445": "x",  # cyrillic small letter ha
    "\u044c": "b",  # cyrillic small letter soft sign
    "\u0455": "s",  # cyrillic small letter dze
    "\u0456": "i",  # cyrillic small letter byelorussian-ukrainian i
    "\u0457": "i",  # cyrillic small letter yi
    "\u0458": "j",  # cyrillic small letter je
    "\u0501": "d",  # cyrillic small letter komi de
    "\u04bb": "h",  # cyrillic small letter shha
    "\u051b": "q",  # cyrillic small letter qa
    "\u051d": "w",  # cyrillic small letter we
    "\u0461": "w",  # cyrillic small letter omega
    "\u04af": "y",  # cyrillic small letter straight u
    "\u04cf": "l",  # cyrillic small letter palochka
    "\u0475": "v",  # cyrillic small letter izhitsa
    # Greek
    "\u03b1": "a",  # greek small letter alpha
    "\u03b2": "b",  # greek small letter beta
    "\u03b3": "y",  # greek small letter gamma
    "\u03b5": "e",  # greek small letter epsilon
    "\u03b6": "z",  # greek small letter zeta
    "\u03b7": "n",  # greek small letter eta
    "\u03b9": "i",  # greek small letter iota
    "\u03ba": "k",  # greek small letter kappa
    "\u03bc": "u",  # greek small letter mu
    "\u03bd": "v",  # greek small letter nu
    "\u03bf": "o",  # greek small letter omicron
    "\u03c1": "p",  # greek small letter rho
    "\u03c4": "t",  # greek small letter tau
    "\u03c5": "u",  # greek small letter upsilon
    "\u03c7": "x",  # greek small letter chi
    "\u03f2": "c",  # greek lunate sigma symbol
    "\u03f3": "j",  # greek letter yot
    "\u03c9": "w",  # greek small letter omega
    # Latin variants
    "\u0131": "i",  # latin small letter dotless i
    "\u0237": "j",  # latin small letter dotless j
    "\u0251": "a",  # latin small letter alpha
    "\u0261": "g",  # latin small letter script g
    "\u0269": "i",  # latin small letter iota
    "\u028b": "v",  # latin small letter v with hook
    "\ua7b5": "b",  # latin small letter beta
}


def normalize(username: str) -> str:
    """The form a username is stored in (NFKC)."""
    return unicodedata.normalize("NFKC", username)


def key(username: str) -> str:
    """What makes two usernames the same: NFKC_Casefold."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", username).casefold())


def skeleton(username: str) -> str:
    """The username's :func:`key` with lookalike letters replaced by the Latin ones they read
    as: equal skeletons with different keys are confusable names."""
    return "".join(_LOOKALIKES.get(c, c) for c in key(username))


def _script(char: str) -> str | None:
    """The script of a letter or digit (None for ASCII digits and marks, which go with any)."""
    if "0" <= char <= "9" or unicodedata.category(char).startswith("M"):
        return None
    word = unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]
    return _SCRIPT_ALIASES.get(word, word)


def scripts(username: str) -> frozenset[str]:
    return frozenset(s for c in username if c.isalnum() and (s := _script(c)) is not None)


def check_script(username: str) -> str | None:
    """Why the name mixes scripts it may not (one line), or None when it does not."""
    found = scripts(username)
    if len(found) <= 1 or any(found <= mix for mix in _ALLOWED_MIXES):
        return None
    return (
        "username: mixes letters of the scripts " + ", ".join(sorted(found)).lower()
        + " (a name is written in one script, so that it cannot pass for another)"
    )  # fmt: skip
