"""Open-ended names for the second corpus: zone names and mission targets drawn from *families*
(how a name is built), so the model learns to copy a name rather than recall one from a list.

A family is a shape: made-up words, place words with a direction, a word and a number, a
possessive, an event, a phonetic-alphabet code, a name in another script, a lowercase phrase. The
families of :data:`HELDOUT_FAMILIES` (initials, ordinals, long names of four words or more) never
occur in train: validation and test measure how copying carries over to a shape never trained.
Words are coined (pronounceable syllables, or the training tokenizer's own word pieces) or taken
from the first corpus's pools, which are split by word (``clover.airspace.phrasing._pool``).
"""

from __future__ import annotations

import random

from clover.airspace.phrasing import CITIES, NATO, OBJECTS, PLACES, PREFIXES, _pool, coined_word

TRAIN_FAMILIES = ("coined", "place", "numbered", "possessive", "event", "nato", "script", "lower")
HELDOUT_FAMILIES = ("initials", "ordinal", "long")  # validation and test only
FAMILIES = TRAIN_FAMILIES + HELDOUT_FAMILIES
# validation and test draw a held-out family this often (train never does)
HELDOUT_SHARE = 0.3

# fmt: off
EVENTS = ("Festival", "Marathon", "Parade", "Rally", "Concert", "Fireworks", "Airshow", "Regatta", "Fair", "Match",
          "Carnival", "Open Day", "Race", "Vigil", "Market Day")
STREETS = ("Street", "Avenue", "Road", "Lane", "Quay", "Boulevard", "Way")
# other scripts, one alphabet each: coined words are syllables of these letters
_CYRILLIC = ("ба", "ва", "го", "да", "ель", "жи", "за", "ки", "ло", "ми", "но", "ов", "пр", "ра", "ск", "то", "ул",
             "ф", "хо", "ця", "че", "ша", "ый", "я", "ск", "град", "мир")
_GREEK = ("α", "βα", "γο", "δε", "ζη", "θε", "κα", "λι", "μο", "νε", "ξα", "πο", "ρι", "σα", "τα", "υ", "φι", "χο",
          "ψα", "ωνα", "ος", "ης")
_KANA = ("あ", "か", "さ", "た", "な", "は", "ま", "や", "ら", "わ", "き", "し", "ち", "に", "み", "り", "ア", "カ",
         "サ", "タ", "ナ", "ハ", "マ", "ヤ", "ラ", "ワ", "ト", "ン")
_KANJI = ("公園", "駅", "港", "橋", "山", "川", "塔", "城", "空港", "広場", "病院", "倉庫")
_ARABIC = ("ال", "ب", "ت", "ج", "د", "ر", "س", "ش", "ع", "ف", "ق", "ك", "ل", "م", "ن", "ه", "و", "ي")
_ACCENTS = {"a": "áàâäå", "e": "éèêë", "i": "íî", "o": "óôöø", "u": "úüû", "n": "ñ", "c": "ç"}
# fmt: on


def _syllables(rng: random.Random, alphabet: tuple, lo: int = 2, hi: int = 4) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def script_word(rng: random.Random) -> str:
    """A made-up word in another script: Cyrillic, Greek, Japanese, Arabic, or accented Latin."""
    k = rng.randrange(5)
    if k == 0:
        w = _syllables(rng, _CYRILLIC)
        return w[0].upper() + w[1:]
    if k == 1:
        w = _syllables(rng, _GREEK)
        return w[0].upper() + w[1:]
    if k == 2:
        return _syllables(rng, _KANA) + (rng.choice(_KANJI) if rng.random() < 0.6 else "")
    if k == 3:
        return _syllables(rng, _ARABIC, 3, 5)
    w = coined_word(rng)
    i = next((j for j, ch in enumerate(w) if ch in _ACCENTS), None)
    if i is not None:
        w = w[:i] + rng.choice(_ACCENTS[w[i]]) + w[i + 1 :]
    return w[0].upper() + w[1:]


def word(rng: random.Random, items: tuple, split: str, pieces: tuple[str, ...] = ()) -> str:
    """A name word: coined (half the time; in train from the tokenizer's word ``pieces`` too) or a
    word of ``items`` that only ``split`` uses. Coined words are capitalised like the pool's."""
    if rng.random() < 0.5:
        w = coined_word(rng, pieces if split == "train" else ())
        return w if items is OBJECTS else w[0].upper() + w[1:]
    return rng.choice(_pool(items, split))


def _family(rng: random.Random, split: str) -> str:
    if split != "train" and rng.random() < HELDOUT_SHARE:
        return rng.choice(HELDOUT_FAMILIES)
    return rng.choice(TRAIN_FAMILIES)


def _initial(rng: random.Random) -> str:
    return rng.choice("ABCDEFGHJKLMNPRSTW")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


# letters for initials inside trained names: none of them starts a held-out ``initials`` name
_TRAIN_LETTERS = "IOQUVXYZ"
# a share of train's names (none in validation and test, whose draws stay as they were) that go on
# across what a name's first word may end at: "&", an abbreviation's or initial's full stop, an
# ordinal, a hyphen; in the trained families only, built otherwise than the held-out ones
EDGE_SHARE = 0.25


def edge_name(rng: random.Random, fam: str, w, thing) -> str:
    """A trained family's name that goes on past an ampersand, a full stop, an ordinal or a
    hyphen ("Varn & Kessel Yard", "Mt. Orel Quarry", "Pier 3rd Berth", "Kessel-Orel Works")."""
    letter = lambda: rng.choice(_TRAIN_LETTERS)
    if fam == "coined":
        return rng.choice([f"{w(CITIES)} & {w(CITIES)} {thing()}", f"{w(CITIES)}-{w(CITIES)} {thing()}"])
    if fam == "place":
        return rng.choice([f"Mt. {w(CITIES)} {thing()}", f"{w(CITIES)} {letter()}. {thing()}", f"Ft. {w(CITIES)}"])
    if fam == "numbered":
        n = rng.randint(1, 99)
        return rng.choice([f"{thing()} {_ordinal(n)} Level", f"{_ordinal(n)} {thing()}", f"{thing()} No. {n}"])
    if fam == "possessive":
        return rng.choice([f"{letter()}. {w(CITIES)}'s {thing()}", f"{w(CITIES)} & {w(CITIES)}'s {thing()}"])
    if fam == "event":
        return rng.choice(
            [
                f"{w(CITIES)} & {w(CITIES)} {rng.choice(EVENTS)}",
                f"{_ordinal(rng.randint(2, 60))} {w(CITIES)} {rng.choice(EVENTS)}",
            ]
        )
    if fam == "nato":
        return f"{w(NATO)} & {w(NATO)}"
    if fam == "lower":
        return f"{w(CITIES)} & {thing()}".lower()
    return f"{script_word(rng)} & {script_word(rng)}"


def name(rng: random.Random, split: str, target: bool = False, pieces: tuple[str, ...] = ()) -> tuple[str, str]:
    """(a zone name, or with ``target`` a mission target; its family)."""
    fam = _family(rng, split)
    w = lambda items=PLACES: word(rng, items, split, pieces)
    thing = (lambda: w(OBJECTS)) if target else (lambda: w(PLACES))
    if split == "train" and rng.random() < EDGE_SHARE:
        return edge_name(rng, fam, w, thing), fam
    if fam == "coined":
        out = " ".join(w(CITIES) for _ in range(rng.choice((1, 1, 2, 3))))
        out = f"{out} {thing()}" if rng.random() < 0.4 else out
    elif fam == "place":
        out = rng.choice(
            [
                f"{rng.choice(PREFIXES)} {thing()}",
                f"{thing()} {rng.choice(PREFIXES)}",
                f"{w(CITIES)} {thing()}",
                f"{w(PLACES)} {w(OBJECTS) if target else w(NATO)}",
            ]
        )
    elif fam == "numbered":
        n = rng.choice([rng.randint(1, 9), rng.randint(10, 99), rng.randint(100, 999)])
        out = rng.choice(
            [
                f"{thing()} {n}",
                f"{thing()} {n}{rng.choice('ABCDEFGH')}",
                f"{thing()} {rng.choice('ABCDEFGH')}{rng.randint(1, 99)}",
                f"{thing()}-{n}",
                f"Sector {n}-{rng.choice('ABCDEFGH')}",
                f"Gate {rng.choice('ABCDEFGH')}{n}",
            ]
        )
    elif fam == "possessive":
        out = rng.choice(
            [
                f"St. {w(CITIES)}'s {thing()}",
                f"{w(CITIES)}'s {thing()}",
                f"O'{w(CITIES)} {thing()}",
                f"{w(CITIES)}'s {w(PLACES)} {thing()}",
                f"Saint {w(CITIES)}'s {thing()}",
            ]
        )
    elif fam == "event":
        out = rng.choice(
            [
                f"{w(CITIES)} {rng.choice(EVENTS)}",
                f"{w(PLACES)} {rng.choice(EVENTS)}",
                f"{w(CITIES)} {rng.choice(EVENTS)} {rng.randint(2020, 2031)}",
            ]
        )
    elif fam == "nato":
        nato = w(NATO)
        out = rng.choice([f"Zone {nato}", nato, f"{nato}-{rng.randint(1, 9)}", f"{nato} {rng.randint(1, 99)}"])
    elif fam == "script":
        sw = script_word(rng)
        out = rng.choice([sw, f"{sw} {script_word(rng)}", f"{sw} {thing()}", f"{thing()} {sw}"])
    elif fam == "lower":
        out = f"{rng.choice(PREFIXES)} {thing()}".lower() if rng.random() < 0.5 else f"{w(CITIES)} {thing()}".lower()
    elif fam == "initials":
        a, b = _initial(rng), _initial(rng)
        out = rng.choice([f"{a}.{b}. {w(CITIES)} {thing()}", f"{a}&{b} {thing()}", f"{a}. {w(CITIES)} {thing()}"])
    elif fam == "ordinal":
        out = f"{_ordinal(rng.randint(1, 120))} {rng.choice(STREETS)} {thing()}"
    else:  # long: four words or more
        out = rng.choice(
            [
                f"Old {w(CITIES)} {w(PLACES)} of {w(CITIES)}",
                f"{rng.choice(PREFIXES)} {w(CITIES)} {w(PLACES)} {thing()}",
                f"{w(CITIES)} and {w(CITIES)} {thing()} {rng.choice(STREETS)}",
            ]
        )
    return out, fam
