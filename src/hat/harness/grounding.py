"""Numbers in text, and whether a reply's numbers are grounded: the one parser of the runtime's
hooks (``grounded_claims``, ``claims_check``), the simulator's oracle and the judges.

Why one module: the hook that rejects a reply, the oracle that writes reference replies and the
judge that scores them must agree on what a number is and when it is supported. With three
parsers they did not: the oracle read ``"1,299"`` as 1.299 while the hook and the judges read
1299, so a reply one side accepted the other rejected. It lives in the core because the
runtime's hooks need it, and it imports nothing but the standard library.

**What a number is** (:data:`NUMBER`, :func:`norm_number`):

- *Words*: digits glued after letters belong to a code, not a number (``LIVE10``, ``A12345``,
  ``x2``, ``v1.2`` hold none); digits followed by a unit are a number (``3pcs`` is 3, ``2x`` is 2,
  ``110cm`` is 110).
- *Separators*: commas between groups of exactly three digits are thousands (``1,299`` = 1299,
  ``1,299,000`` = 1299000, ``1,299.50`` = 1299.5); any other comma is a decimal comma (``4,99`` =
  4.99). A dot is a decimal point: ``1.299`` is 1.299, because a lone dot group is ambiguous and
  the data replies quote (tool results) is JSON, which writes decimals with a dot. The continental
  form is read only where it cannot be a decimal: ``1.299,00`` = 1299 and ``1.299.000`` = 1299000.
- *Values* compare as exact decimals, never floats: ``49.90`` == ``49.9``, ``007`` == ``7``, and
  ``1234567`` != ``1234568`` (a float's 6-digit ``%g`` made them equal).
- *Ranges and signs*: ``10-20``, ``10–20`` and ``10 to 20`` are two numbers, 10 and 20, each
  grounded on its own; a ``-`` before digits is a dash, never a minus (no reply needs a negative
  amount), so ``-5`` is 5.
- *Dates and times* are plain numbers (``2024-05-01`` is 2024, 5, 1; ``12:30`` is 12, 30); a
  dotted date reads as a decimal (``01.05.2024`` is 1.05): nothing in the live room writes one.

**Kinds** (:func:`find_numbers`): ``money`` when a currency sign or code stands next to it
(``$12``, ``¥1,299``, ``€5``, ``USD 12``, ``12 USD``, ``12€``, ``12 dollars``), ``percent``
(``20%``, ``20 %``, ``20 percent``, ``20 pct``), else ``plain``. A year is plain, so "since 2019"
is never read as a price.

**Grounded** (:class:`Grounding`): a reply's number is supported when its value is in the *data*
(tool results, gold facts, allowed numbers: any kind), or occurs with the same kind in *typed*
text (a prompt that says "12 turns" does not ground "$12"; a plain reply number matches any
kind), or is a plain number in the *plain* text (a user's order number may be echoed, a
user's guessed price may not). The runtime hook and the oracle put everything they know in
``data``; the judges use all three.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from decimal import MAX_PREC, Context, Decimal, InvalidOperation
from typing import Any, Literal

__all__ = [
    "NUMBER",
    "Grounding",
    "Kind",
    "Number",
    "find_numbers",
    "is_number",
    "mentions_number",
    "norm_number",
    "norm_value",
    "numbers_in",
    "typed_numbers",
]

Kind = Literal["money", "percent", "plain"]

NUMBER = re.compile(
    r"(?<![\w.])(?:"
    r"\d{1,3}(?:\.\d{3})+,\d+"  # 1.299,00: dot thousands, decimal comma
    r"|\d{1,3}(?:\.\d{3}){2,}(?![.,]?\d)"  # 1.299.000: two dot groups or more
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![,\d])"  # 1,299 / 1,299.50: comma thousands
    r"|\d+(?:[.,]\d+)?"  # 1299, 49.90, 4,99
    r")"
)
"""A number as written (module docstring): digits inside words (``LIVE10``) are skipped."""

_CONTINENTAL = re.compile(r"\d{1,3}(?:\.\d{3})+(?:,\d+)?")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_EXACT = Context(prec=MAX_PREC)  # normalise without rounding a long digit string
_CURRENCY_CODES = r"usd|eur|gbp|rmb|cny|jpy"
_MONEY_BEFORE = re.compile(rf"(?:[$€£¥]|\b(?:{_CURRENCY_CODES}))\s?$", re.IGNORECASE)
_MONEY_AFTER = re.compile(
    rf"\s?(?:[$€£¥]|(?:{_CURRENCY_CODES}|dollars?|bucks|euros?|pounds?|yuan|yen)\b)", re.IGNORECASE
)
_PERCENT_AFTER = re.compile(r"\s?(?:%|percent\b|pct\b)", re.IGNORECASE)
_RANGE = re.compile(r"\s?[-–—]\s?|\s+to\s+", re.IGNORECASE)  # between the two ends of "10-20", "10 to 20"


def norm_number(text: str) -> str:
    """Canonical form of one number as written: ``"49.90"`` -> ``"49.9"``, ``"1,299"`` ->
    ``"1299"``, ``"4,99"`` -> ``"4.99"``, ``"1.299,00"`` -> ``"1299"``, ``"007"`` -> ``"7"``. Text
    that is not a number comes back unchanged."""
    text = text.strip()
    if _CONTINENTAL.fullmatch(text) and ("," in text or text.count(".") > 1):  # not "1.299": a decimal
        text = text.replace(".", "").replace(",", ".")
    elif _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    else:
        text = text.replace(",", ".")
    try:
        value = Decimal(text).normalize(_EXACT)
    except InvalidOperation:
        return text
    return format(value, "f")


def norm_value(value: Any) -> str | None:
    """A JSON number (``int`` or ``float``, not ``bool``) in canonical form; ``None`` for anything
    else. ``45.0`` -> ``"45"``, ``1e-05`` -> ``"0.00001"``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return norm_number(repr(value)) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Number:
    """One number found in a text. ``text`` is the digits as written (``"1,299"``), ``value`` their
    canonical form (``"1299"``); ``start``/``end`` span the digits, ``span`` also the currency
    sign or word and the percent sign next to them (``"$1,299"``, ``"20 percent"``)."""

    text: str
    value: str
    kind: Kind
    start: int
    end: int
    span: tuple[int, int]


def _number(text: str, match: re.Match[str]) -> Number:
    start, end = match.start(), match.end()
    sign = _MONEY_BEFORE.search(text[max(0, start - 5) : start])
    money_after = _MONEY_AFTER.match(text, end)
    percent = _PERCENT_AFTER.match(text, end)
    kind: Kind = "money" if sign or money_after else "percent" if percent else "plain"
    unit = percent or money_after
    span = (start - len(sign.group()) if sign else start, unit.end() if unit else end)
    return Number(match.group(), norm_number(match.group()), kind, start, end, span)


def find_numbers(text: str) -> list[Number]:
    """Every number of ``text``, in order, with its kind (module docstring). The two ends of a
    range share a kind: ``$10-20`` is two amounts, ``10 to 20%`` two percentages."""
    numbers = [_number(text, m) for m in NUMBER.finditer(text)]
    for i in range(len(numbers) - 1):
        low, high = numbers[i], numbers[i + 1]
        if _RANGE.fullmatch(text, low.span[1], high.span[0]) and (low.kind == "plain") != (high.kind == "plain"):
            kind = high.kind if low.kind == "plain" else low.kind
            numbers[i : i + 2] = [replace(low, kind=kind), replace(high, kind=kind)]
    return numbers


def numbers_in(text: str) -> list[str]:
    """Every number of ``text`` in canonical form, in order."""
    return [norm_number(n) for n in NUMBER.findall(text)]


def typed_numbers(text: str) -> list[tuple[str, Kind]]:
    """``(value, kind)`` for every number of ``text``: ``money``, ``percent`` or ``plain``."""
    return [(n.value, n.kind) for n in find_numbers(text)]


def is_number(text: str) -> bool:
    """``text`` is one number and nothing else (``"49.90"``, ``"1,299"``; not ``"10%"``)."""
    return NUMBER.fullmatch(text.strip()) is not None


def mentions_number(text: str, number: str) -> bool:
    """``text`` states the number ``number`` as a whole number: ``"3"`` is in ``"3 left"`` and
    ``"3pcs"``, not in ``"30"``, ``"3.5"`` or ``"LIVE3"``; ``"1299"`` is in ``"$1,299"``."""
    return norm_number(number) in numbers_in(text)


@dataclass(frozen=True)
class Grounding:
    """Where a reply's numbers may come from, as canonical values (module docstring): ``data``
    grounds any kind, ``typed`` the same kind (a plain reply number: any), ``plain`` plain
    numbers only."""

    data: frozenset[str] = frozenset()
    typed: frozenset[tuple[str, Kind]] = frozenset()
    plain: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        data: Iterable[str] = (),
        *,
        typed: Iterable[str] = (),
        plain: Iterable[str] = (),
        values: Iterable[Any] = (),
    ) -> Grounding:
        """The grounding of texts: the numbers of ``data``, ``typed`` and ``plain`` texts, plus
        ``values`` taken as numbers of the data (a hook's ``allowed_numbers``)."""
        numbers = {n for text in data for n in numbers_in(text)} | {norm_number(str(v)) for v in values}
        kinds = {pair for text in typed for pair in typed_numbers(text)}
        return cls(frozenset(numbers), frozenset(kinds), frozenset(n for text in plain for n in numbers_in(text)))

    def supports(self, number: str, kind: Kind = "plain") -> bool:
        """Whether the canonical ``number`` of ``kind`` is grounded."""
        if number in self.data or (number, kind) in self.typed:
            return True
        return kind == "plain" and (number in self.plain or any(n == number for n, _ in self.typed))

    def unsupported(self, text: str) -> list[Number]:
        """The numbers of ``text`` this grounding does not support, in order."""
        return [n for n in find_numbers(text) if not self.supports(n.value, n.kind)]
