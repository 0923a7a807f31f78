"""Claims a reply makes, checked against what the tools of *this* request returned.

Why a module of its own: the ``grounded_claims`` hook checks that a reply's *numbers* come from
somewhere, but "the blue dress in M is in stock" has no number, and a live host saying it right
after ``get_stock`` returned 0 units for blue/M is the worst kind of wrong. This module reads a
reply's claims — availability, prices, discounts, shipping and return policies — and compares them
with this request's tool results; :class:`ClaimsCheckHook` (``claims_check`` in the livestream
harness, bound as ``python:hat.env.claims:ClaimsCheckHook``: it is the live room's, not the core's) turns a
:class:`Conflict` into a retry whose feedback names the tool result. Numbers are read by
:mod:`hat.harness.grounding`, the one parser of the hooks, the oracle and the judges (its names are
re-exported here for older imports).

**Evidence** is recognised by the *shape* of a result (the live-room tool contract of
:mod:`hat.env.livestream_tools`), not by tool name, so the check follows HSA renames and a feedback
message names the tool as the model called it: stock (``qty`` + ``variants``), prices (``price``,
``promo_price``), coupons (``coupons``), shipping and returns (``ships_in_days``, ``fee``,
``free_over``, ``region`` / ``ships_to_region``, ``return_policy``). Nothing the *request* supplied
is evidence: the room (campaign, turns and time left) is the caller's data, so the number check
(:class:`~hat.harness.hooks.GroundedClaimsHook`, ``trusted_context: [product, faq]`` in the
livestream harness) does not count the numbers it put into the prompt.

**Scope**: a claim is checked only when this request has a result on its topic; a claim nothing
speaks to is left to the number check. Matching is deliberately conservative — a question, a
condition ("if it sells out …"), or a clause naming several colours *and* several sizes is skipped —
because a false alarm costs a retry of a correct reply, while a miss costs only what the check
missed before it existed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hat.harness.grounding import NUMBER, Number, find_numbers, norm_number, norm_value, numbers_in, typed_numbers
from hat.harness.hooks import Hook, HookContext, Verdict

__all__ = [
    "CLAIM_KINDS",
    "NUMBER",
    "ClaimsCheckHook",
    "Conflict",
    "Evidence",
    "find_conflicts",
    "norm_number",
    "numbers_in",
    "typed_numbers",
]

CLAIM_KINDS = ("availability", "price", "discount", "policy")


# -- evidence and conflicts ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Evidence:
    """One successful tool result of this request, under the name the model called the tool by."""

    tool: str
    result: Mapping[str, Any]


@dataclass(frozen=True)
class Conflict:
    """A claim of the reply that a tool result contradicts. ``evidence`` says what the tool returned
    (``get_stock returned 0 units for blue/M``), ``claim`` quotes the reply."""

    kind: str
    evidence: str
    claim: str

    @property
    def message(self) -> str:
        return f'{self.evidence}; the reply says "{self.claim}"'


def find_conflicts(reply: str, evidence: Sequence[Evidence], kinds: Sequence[str] = CLAIM_KINDS) -> list[Conflict]:
    """Every claim of ``reply`` that ``evidence`` contradicts, availability first."""
    checks = (_stock_conflicts, _price_conflicts, _discount_conflicts, _policy_conflicts)  # CLAIM_KINDS' order
    return [c for kind, check in zip(CLAIM_KINDS, checks, strict=True) if kind in kinds for c in check(reply, evidence)]


# -- clauses -------------------------------------------------------------------------------------------
_BOUNDARY = re.compile(
    r"[!?;\n]+|\.(?!\d)|,\s*(?:but|and|while|whereas|though)\b|\s(?:but|while|whereas|however)\b", re.IGNORECASE
)
_CONDITIONAL = re.compile(r"\b(?:if|whether|once|when|until|unless|in case)\b", re.IGNORECASE)


def _clauses(text: str) -> list[str]:
    """Statements of ``text``: split at sentence ends and contrastive joints ("…, but …"); questions
    and conditions ("if it sells out …") dropped — they claim nothing."""
    out, start = [], 0
    for match in _BOUNDARY.finditer(text):
        out.append((text[start : match.start()], "?" in match.group()))
        start = match.end()
    out.append((text[start:], False))
    return [c.strip() for c, question in out if c.strip() and not question and not _CONDITIONAL.search(c)]


# -- availability --------------------------------------------------------------------------------------
_NEG_STOCK = re.compile(
    r"\b(?:sold[ -]?out(?![ -](?:items?|sizes?|products?|colou?rs?|variants?))|out of stock|unavailable"
    r"|(?:not|no longer|isn['’]?t|aren['’]?t)\s+(?:currently\s+|yet\s+)?(?:in stock|available)"
    r"|(?:none|nothing|zero)\s+(?:is\s+|are\s+)?left|no (?:more|stock|units?|pieces?) left|no stock)\b",
    re.IGNORECASE,
)
_UNIT = r"(?:(?:more|units?|pieces?|pcs|pairs?|items?|ones?|of (?:them|these|those))\s+)?"
_COUNT = re.compile(rf"\b(?:only\s+|just\s+)?(\d+)\s+{_UNIT}(?:left|remaining|in stock|available)\b", re.IGNORECASE)
_POS_STOCK = re.compile(
    rf"\b(?:in stock|available|(?:a few|some|plenty|lots)\s+{_UNIT}left|back in stock|restocked)\b", re.IGNORECASE
)
# "free shipping available", "the promo price is available": "available" about something else.
_OTHER_TOPIC = re.compile(
    r"\b(?:ship\w*|deliver\w*|price|promo\w*|coupon|code|deal|discount|return\w*|refund|pay\w*)\b", re.IGNORECASE
)
_SIZE_WORDS = {"small": "s", "medium": "m", "large": "l", "extra large": "xl", "x-large": "xl"}


@dataclass(frozen=True)
class _Stock:
    tool: str
    product: str
    name: str
    color: str | None
    size: str | None
    qty: int
    variants: tuple[Mapping[str, Any], ...]

    def label(self, color: str | None = None, size: str | None = None) -> str:
        parts = [str(x) for x in (color or self.color, size or self.size) if x]
        return "/".join(parts) if parts else str(self.name or self.product or "the product")

    def covers(self, color: str | None, size: str | None) -> bool:
        """This call's variants include every variant of (color, size) (None: any)."""
        return self.color in (None, color) and self.size in (None, size)

    def consistent(self, color: str | None, size: str | None) -> bool:
        """This call asked about a variant the mention fits (the reply names less than was asked)."""
        return color in (None, self.color) and size in (None, self.size)

    def qty_of(self, color: str | None, size: str | None) -> int:
        fits = [v for v in self.variants if color in (None, v.get("color")) and size in (None, v.get("size"))]
        return sum(int(v.get("qty") or 0) for v in fits)


def _as_stock(item: Evidence) -> _Stock | None:
    r = item.result
    if not isinstance(r.get("qty"), int) or not isinstance(r.get("variants"), list):
        return None
    variants = tuple(v for v in r["variants"] if isinstance(v, Mapping))
    color, size = r.get("color"), r.get("size")
    return _Stock(item.tool, str(r.get("product") or ""), str(r.get("name") or ""), color, size, r["qty"], variants)


def _polarity(clause: str) -> tuple[bool | None, str, int | None]:
    """(in stock?, the words that say so, a count if one is stated); None: no availability claim
    (or both kinds in one clause: ambiguous)."""
    negative = _NEG_STOCK.search(clause)
    rest = _NEG_STOCK.sub(" ", clause)
    count = _COUNT.search(rest)
    positive = count or _POS_STOCK.search(rest)
    if positive and positive.group().lower().endswith("available") and _OTHER_TOPIC.search(rest):
        positive = None
    if negative and positive:
        return None, "", None
    if negative:
        return False, negative.group(), None
    if count:
        n = int(count.group(1))
        return n > 0, count.group().strip(), n
    return (True, positive.group(), None) if positive else (None, "", None)


def _option_pattern(option: str, *, size: bool) -> re.Pattern[str]:
    if size and option.isalpha() and len(option) <= 3:  # "M", "XL": capitals, or "size m" / "medium"
        words = [w for w, s in _SIZE_WORDS.items() if s == option.lower()]
        spelled = "|".join([rf"size\s+{re.escape(option.lower())}", *words])
        return re.compile(rf"(?<![\w'’-]){re.escape(option.upper())}(?![\w'’-])|(?i:\b(?:{spelled})\b)")
    body = re.escape(option).replace(r"\ ", r"\s?")
    return re.compile(rf"(?<![\w.-]){body}(?![\w-])", re.IGNORECASE)


def _mentioned(clause: str, options: set[str], *, size: bool) -> tuple[list[str], str]:
    """Options named in ``clause`` (longest first, so "light blue" is not also "blue") and the clause
    with them blanked out (a size like "30 ml" must not read as a count)."""
    found = []
    for option in sorted(options, key=len, reverse=True):
        pattern = _option_pattern(option, size=size)
        if pattern.search(clause):
            found.append(option)
            clause = pattern.sub(" ", clause)
    return found, clause


def _for_product(stocks: list[_Stock], clause: str) -> list[_Stock]:
    """The calls a clause can be about: all of them for one product; else the product it names."""
    if len({s.product for s in stocks}) <= 1:
        return stocks
    lowered = clause.lower()
    named = {s.product for s in stocks if any(w in lowered for w in re.findall(r"[a-z]{4,}", s.name.lower()))}
    return [s for s in stocks if s.product in named] if len(named) == 1 else []


def _scope_truth(stocks: list[_Stock], color: str | None, size: str | None) -> tuple[int, _Stock, str] | None:
    """(units, the call that says so, its label) for the variant (color, size): from a call that
    covers it, else from calls that asked about a narrower variant the mention fits, if they agree."""
    covering = [s for s in stocks if s.covers(color, size)]
    if covering:
        return covering[0].qty_of(color, size), covering[0], covering[0].label(color, size)
    fitting = [s for s in stocks if s.consistent(color, size)]
    if fitting and len({s.qty > 0 for s in fitting}) == 1:
        return fitting[0].qty, fitting[0], fitting[0].label()
    return None


def _stock_clause(clause: str, stocks: list[_Stock]) -> Conflict | None:
    colors = {str(v["color"]) for s in stocks for v in s.variants if v.get("color")}
    sizes = {str(v["size"]) for s in stocks for v in s.variants if v.get("size")}
    named_colors, rest = _mentioned(clause, colors, size=False)
    named_sizes, rest = _mentioned(rest, sizes, size=True)
    in_stock, words, count = _polarity(rest)
    if in_stock is None or (len(named_colors) > 1 and len(named_sizes) > 1):
        return None
    any_color: list[str | None] = [*named_colors] or [None]
    any_size: list[str | None] = [*named_sizes] or [None]
    scopes = [(c, s) for c in any_color for s in any_size]
    for color, size in scopes:
        truth = _scope_truth(stocks, color, size)
        if truth is None:
            continue
        qty, stock, label = truth
        wrong_count = count is not None and len(scopes) == 1 and count != qty
        if (qty > 0) != in_stock or wrong_count:
            return Conflict("availability", f"{stock.tool} returned {qty} units for {label}", words)
    return None


_AND = re.compile(r"\s+(?:and|&)\s+", re.IGNORECASE)
_LEADING_COUNT = re.compile(r"^(\s*(?:only\s+|just\s+)?\d+)\b(?!\s*(?:%|[.,]\d))")
_STOCK_PREDICATE = re.compile(r"\b(?:left|remaining|in stock|available)\b", re.IGNORECASE)


def _conjuncts(part: str) -> list[str]:
    """One claim per conjunct of a coordinated count ("24 in stock in blue (S) and 9 in red (L)"):
    a conjunct that opens with a bare count takes the stock predicate the clause states ("9 in red
    (L)" reads "9 in stock in red (L)"). Without the split, a clause naming two colours and two sizes
    is ambiguous and goes unchecked (the attempt 6 demo's stock reply, reports/stage1b.md §5)."""
    pieces = _AND.split(part)
    predicate = _STOCK_PREDICATE.search(part)
    if len(pieces) < 2 or predicate is None or sum(bool(re.search(r"\b\d+\b", p)) for p in pieces) < 2:
        return [part]
    out = []
    for piece in pieces:
        bare = _LEADING_COUNT.match(piece)
        out.append(
            f"{bare.group(1)} {predicate.group()}{piece[bare.end() :]}" if bare and not _COUNT.search(piece) else piece
        )
    return out


def _stock_conflicts(reply: str, evidence: Sequence[Evidence]) -> list[Conflict]:
    stocks = [s for s in map(_as_stock, evidence) if s is not None]
    if not stocks:
        return []
    out = []
    for clause in _clauses(reply):
        rest = _NEG_STOCK.sub(" ", clause)
        mixed = rest != clause and (_POS_STOCK.search(rest) or _COUNT.search(rest))
        parts = clause.split(",") if mixed else [clause]  # "red is sold out, blue M is in stock"
        for part in (c for p in parts for c in _conjuncts(p)):
            relevant = _for_product(stocks, part)
            conflict = _stock_clause(part, relevant) if relevant else None
            if conflict is not None:
                out.append(conflict)
    return out


# -- prices and discounts ------------------------------------------------------------------------------
_DISCOUNT_AFTER = re.compile(r"\s*(?:off|discount)\b", re.IGNORECASE)
_THRESHOLD_BEFORE = re.compile(
    r"(?:over|above|orders?\s+(?:of|from)|spend(?:ing)?|minimum(?: of)?|min\.?|at least|reach(?:es|ing)?|more than)"
    r"\s*(?:[$€£¥]|usd|eur|gbp)?\s?$",
    re.IGNORECASE,
)
_THRESHOLD_AFTER = re.compile(r"\s*(?:\+|or more|and up|and above|minimum)", re.IGNORECASE)
_SHIPPING_WORDS = re.compile(r"\b(?:ship\w*|deliver\w*|postage|fee)\b", re.IGNORECASE)
_PRICE_WORDS = re.compile(r"\b(?:price\w*|costs?|only|just|now|deal|sale|was|list|regular|down from)\b", re.I)
_CODE = re.compile(r"\b[A-Z]{2,}[0-9]{1,3}\b")
_CODE_WORDS = re.compile(r"\b(?:code|coupon|voucher|promo)\b", re.IGNORECASE)


def _money_role(clause: str, number: Number) -> str:
    """What a money amount in ``clause`` is: a ``discount`` ("$10 off"), a ``threshold`` ("orders of
    $80 or more"), a ``shipping`` amount, or a ``price``."""
    start, end = number.start, number.end
    if _DISCOUNT_AFTER.match(clause, end):
        return "discount"
    if _THRESHOLD_BEFORE.search(clause[max(0, start - 30) : start]) or _THRESHOLD_AFTER.match(clause, end):
        return "threshold"
    return "shipping" if _SHIPPING_WORDS.search(clause) else "price"


@dataclass
class _Money:
    """The money facts of this request's results by role; each value maps to what the tool said."""

    prices: dict[str, str] = field(default_factory=dict)
    discounts: dict[str, str] = field(default_factory=dict)
    thresholds: dict[str, str] = field(default_factory=dict)
    anywhere: set[str] = field(default_factory=set)
    percents: set[str] = field(default_factory=set)
    codes: set[str] = field(default_factory=set)
    coupons: str = ""  # what the coupon results said; "" when this request has none

    @classmethod
    def of(cls, evidence: Sequence[Evidence]) -> _Money:
        money = cls()
        for item in evidence:
            money.add(item.tool, item.result)
        return money

    def add(self, tool: str, r: Mapping[str, Any]) -> None:
        self.anywhere |= set(numbers_in(json.dumps(dict(r), ensure_ascii=False, default=str)))
        price, promo = norm_value(r.get("price")), norm_value(r.get("promo_price"))
        if price is not None:
            said = f"{tool} returned price {price}" + (f", promo price {promo}" if promo else "")
            said += f" for {r['name']}" if r.get("name") else ""
            self.prices.update({v: said for v in (price, promo) if v is not None})
        if isinstance(r.get("coupons"), list):
            coupons = [c for c in r["coupons"] if isinstance(c, Mapping)]
            listed = ", ".join(f"{c.get('code')} ({c.get('description', '')})" for c in coupons)
            self.coupons = self.coupons or f"{tool} returned {listed or 'no coupons'}"
            self.codes |= {str(c.get("code")) for c in coupons}
            self.discounts.update(
                {v: self.coupons for c in coupons if (v := norm_value(c.get("discount"))) is not None}
            )
            self.thresholds.update(
                {v: self.coupons for c in coupons if (v := norm_value(c.get("threshold"))) is not None}
            )
            text = json.dumps([coupons, r.get("rules")], ensure_ascii=False, default=str)
            self.percents |= {n for n, kind in typed_numbers(text) if kind == "percent"}
        free_over = norm_value(r.get("free_over"))
        if norm_value(r.get("fee")) is not None and free_over:
            self.thresholds.setdefault(free_over, f"{tool} returned free shipping over {free_over}")


_SAVE_BEFORE = re.compile(r"\b(?:save|saving|extra|up to)\s*$", re.IGNORECASE)


def _percent_off(clause: str, number: Number) -> bool:
    """ "90% off", "a 90 percent discount", "save 90%" - not "100% viscose"."""
    after = _DISCOUNT_AFTER.match(clause, number.span[1])
    return bool(after or _SAVE_BEFORE.search(clause[max(0, number.start - 12) : number.start]))


def _price_conflicts(reply: str, evidence: Sequence[Evidence]) -> list[Conflict]:
    """A money amount said as a price must be a price or promo price a tool returned. Where the clause
    does not say "price" ("costs", "only", "now" ...), any amount a tool returned is accepted."""
    money = _Money.of(evidence)
    if not money.prices:
        return []
    said = "; ".join(dict.fromkeys(money.prices.values()))
    out = []
    for clause in _clauses(reply):
        strict = bool(_PRICE_WORDS.search(clause))
        for number in find_numbers(clause):
            value = number.value
            if number.kind != "money" or _money_role(clause, number) != "price" or value in money.prices:
                continue
            if strict or value not in money.anywhere:
                out.append(Conflict("price", said, _quote(clause, number)))
    return out


def _discount_conflicts(reply: str, evidence: Sequence[Evidence]) -> list[Conflict]:
    """With a coupon result in hand: "$N off" must be a coupon's discount, "orders of $N" a threshold
    (or free shipping's), "N% off" a percentage the rules state, a code one of the coupons."""
    money = _Money.of(evidence)
    if not money.coupons:
        return []
    out = []
    for clause in _clauses(reply):
        for number in find_numbers(clause):
            value, kind = number.value, number.kind
            if kind == "percent" and _percent_off(clause, number):
                known: Collection[str] = money.percents
            elif kind == "money" and _money_role(clause, number) in ("discount", "threshold"):
                known = money.discounts if _money_role(clause, number) == "discount" else money.thresholds
            else:
                continue
            if value not in known:
                out.append(Conflict("discount", money.coupons, _quote(clause, number)))
        codes = _CODE.findall(clause) if _CODE_WORDS.search(clause) else []
        out += [Conflict("discount", money.coupons, code) for code in codes if code not in money.codes]
    return out


def _quote(clause: str, number: Number) -> str:
    """A number as the reply wrote it, with its currency, percent sign and "off" ("$39.9", "90% off")."""
    start, end = number.span
    off = _DISCOUNT_AFTER.match(clause, end)
    return clause[start : off.end() if off else end].strip()


# -- shipping and returns ------------------------------------------------------------------------------
_DISPATCH = re.compile(
    r"\b(?:ships?|dispatch(?:es|ed)?|sent out|leaves?(?: the warehouse)?)\s+(?:with)?in\s+(\d+)"
    r"(?:\s*(?:-|–|to)\s*(\d+))?\s*(?:business\s+)?days?\b",
    re.IGNORECASE,
)
_RETURN_DAYS = re.compile(
    r"\b(\d+)[- ]?days?\s+(?:free\s+)?returns?\b|\breturns?\b[^.]{0,30}?\bwithin\s+(\d+)\s+days\b"
    r"|\b(\d+)\s+days\s+to\s+return\b",
    re.IGNORECASE,
)
_NO_RETURNS = re.compile(r"\b(?:no returns|non-?returnable|can(?:no|['’])t be returned|final sale)\b", re.IGNORECASE)
_FREE_RETURNS = re.compile(r"\bfree returns?\b", re.IGNORECASE)
_FREE_SHIPPING = re.compile(r"\bfree (?:shipping|delivery)\b", re.IGNORECASE)
_NO_SHIPPING = re.compile(
    r"\b(?:not|cannot|can['’]?t|never|don['’]?t|doesn['’]?t|won['’]?t)\s+(?:\w+\s+)?(?:ship|deliver)"
    r"|\bno (?:shipping|delivery)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(?:not|no|cannot|can['’]?t|don['’]?t|doesn['’]?t|won['’]?t|never)\b|n['’]t\b", re.I)


def _policy_conflicts(reply: str, evidence: Sequence[Evidence]) -> list[Conflict]:
    out: list[Conflict] = []
    for item in evidence:
        r = item.result
        if "ships_in_days" in r or "return_policy" in r:
            for clause in _clauses(reply):
                out += _shipping_clause(clause, item) + _returns_clause(clause, item)
    return out


def _shipping_clause(clause: str, item: Evidence) -> list[Conflict]:
    r, tool, out = item.result, item.tool, []
    days = r.get("ships_in_days")
    if isinstance(days, int):
        for match in _DISPATCH.finditer(clause):
            low, high = int(match.group(1)), int(match.group(2) or match.group(1))
            if not low <= days <= high:
                out.append(Conflict("policy", f"{tool} returned ships_in_days {days}", match.group()))
    fee, free_over = norm_value(r.get("fee")), norm_value(r.get("free_over"))
    if fee is not None and _SHIPPING_WORDS.search(clause):
        said = f"{tool} returned shipping fee {fee}" + (f", free over {free_over}" if free_over else "")
        if _FREE_SHIPPING.search(clause) and fee != "0" and free_over in (None, "0"):
            out.append(Conflict("policy", said, "free shipping"))
        for number in find_numbers(clause):
            amount = number.value
            if number.kind == "money" and _money_role(clause, number) != "discount" and amount not in {fee, free_over}:
                out.append(Conflict("policy", said, _quote(clause, number)))
    region = str(r.get("region") or "")
    if region and isinstance(r.get("ships_to_region"), bool) and re.search(rf"\b{re.escape(region)}\b", clause, re.I):
        says = None if not _SHIPPING_WORDS.search(clause) else not _NO_SHIPPING.search(clause)
        if says is not None and says != r["ships_to_region"]:
            verb = "ships" if r["ships_to_region"] else "does not ship"
            out.append(Conflict("policy", f"{tool} returned that it {verb} to {region}", clause))
    return out


def _returns_clause(clause: str, item: Evidence) -> list[Conflict]:
    policy = item.result.get("return_policy")
    if not isinstance(policy, str) or not policy:
        return []
    said, out = f'{item.tool} returned the return policy "{policy}"', []
    allowed = set(numbers_in(policy))
    for match in _RETURN_DAYS.finditer(clause):
        days = next(g for g in match.groups() if g)
        if norm_number(days) not in allowed:
            out.append(Conflict("policy", said, match.group()))
    if _FREE_RETURNS.search(clause) and not _NEGATION.search(clause) and "free" not in policy.lower():
        out.append(Conflict("policy", said, "free returns"))
    restricted = re.search(r"\b(?:cannot|can['’]?t|not|no|only|non)\b", policy, re.IGNORECASE)
    no_returns = _NO_RETURNS.search(clause)
    if no_returns and not restricted and re.search(r"\d+[- ]?day", policy):
        out.append(Conflict("policy", said, no_returns.group()))
    return out


# -- the hook ---------------------------------------------------------------------------------------
class ClaimsCheckHook(Hook):
    """A reply must agree with what the tools of this request returned: availability ("in stock",
    "sold out", "available in M", "only 3 left"), prices, discounts and coupon codes, shipping and
    return policies (:func:`find_conflicts`). A contradiction is retried with
    feedback naming the tool result ("get_stock returned 0 units for blue/M; the reply says "in
    stock""). ``checks`` picks claim kinds (default: all of ``availability``, ``price``,
    ``discount``, ``policy``).

    Evidence is recorded at ``after_tool`` - the observation the model saw, under the name it
    called - so only this request's successful results count, never the request's own room. The
    runtime stops consulting ``after_tool`` hooks at the first non-allow verdict: list this hook
    before one that rewrites observations."""

    name = "claims_check"
    _EVIDENCE: ClassVar[str] = "claims_check.evidence"

    def after_tool(self, ctx: HookContext, name: str, arguments: dict[str, Any], result: Any) -> Verdict | None:
        if isinstance(result, dict) and set(result) != {"error"}:  # {"error": …} is a failed call
            ctx.state.setdefault(self._EVIDENCE, []).append(Evidence(name, result))
        return None

    def stop_check(self, ctx: HookContext, reply: dict[str, Any]) -> Verdict | None:
        evidence = ctx.state.get(self._EVIDENCE)
        if not evidence:
            return None
        text = str(reply.get(ctx.harness.output.reply_field, ""))
        kinds = [str(k) for k in self.config.get("checks", CLAIM_KINDS)]
        conflicts = find_conflicts(text, evidence, kinds)
        if not conflicts:
            return None
        return Verdict.retry(self.feedback(f"{conflicts[0].message}. Correct the reply to match the tool result."))
