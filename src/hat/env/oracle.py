"""The oracle expert policy and the degenerate baselines that validate the judges.

:class:`OracleModel` implements the :class:`~hat.models.base.Model` protocol as a privileged expert:
it knows the episode's gold and reads the *current* harness, looking up by function id every name
HSA may change (tools, ``metadata.param_map`` parameters, skills, the skill action, the reply field,
the length limit) and skipping decoy skills, so its trajectories follow any transformation. It is
stateless: each call re-reads the conversation (``tool`` observations, ``user`` feedback) and
decides the next step from it, as a model would, so retries and faulty backends need no
bookkeeping that could drift from the runtime's.

Round 1: a short ``<think>``, the gold skills and tool calls. Then: retry calls that timed out,
failed or came back empty (twice at most, within the round budget), and write one ``<reply>`` from
the results as returned (numbers verbatim) with the gold facts it verified, no forbidden claim, no
ungrounded number, within the limit; repair a rejected reply. Wording comes from ``random.Random``
seeded with ``(seed, episode_id, round)``: same inputs, same bytes. The degenerate policies (same
constructor) are each bad in exactly one way, so a judge can be shown to catch that failure.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hat.env.catalog import Catalog, product_index, token_score, tokens
from hat.env.episode import Episode, GoldCall
from hat.env.world import world_catalog
from hat.harness.grounding import Grounding, is_number, mentions_number
from hat.harness.protocol import ToolCall, parse_output, render_reply, render_tool_call
from hat.harness.state import Harness, Skill, ToolSpec
from hat.models.base import Generation, GenerationConfig, Message
from hat.models.scripted import truncate_at_stop, word_pieces

__all__ = ["OracleModel", "SkillFirstOracle", "SkillScanOracle"]

MAX_TOOL_RETRIES = 2
_MAX_REF_WORDS = 5  # the longest run of a comment's words the oracle passes as a product reference
_FREE_TEXT = {"search_faq": "query", "handoff_to_service": "reason"}  # any wording; gold leaves them None
_TOOL_RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.S)
# The first round's rationale says what the comment asks, in the teacher's fixed words per gold
# function ("Asked: shipping time and fee of jeans."), then the plan under the view's names
# ("Plan: product-qa, then get_shipping."). Attempt 3's rationale gave only the intent, and its model
# wrote the intent words as skill names under renames; attempt 5's quoted each description before its
# name, and its model quoted the wrong description (shipping -> specs) because no step said what was
# asked (reports/stage1b.md §5). The need words never name a tool, so they stay true under renames.
_NEEDS = {
    "get_stock": "units in stock",
    "get_price": "the price",
    "get_shipping": "shipping time and fee",
    "get_specs": "product specs",
    "get_discount_rules": "coupons and promo rules",
    "search_faq": "a store policy",
    "switch_product_link": "show another product",
    "handoff_to_service": "a service ticket",
}
_PLANS = (
    "Asked: {needs}. Plan: {skills}, then {tools}. Answer from the results.",
    "Asked: {needs}. {tools} first; {skills} has the rules. Quote results exactly.",
    "Asked: {needs}. Plan: {skills}, then {tools}. Keep the reply short.",
)
_SKILL_FIRST = (
    "Asked: {needs}. Plan: load {skills} first; its rules name the tool.",
    "Asked: {needs}. {skills} first, then the tool its rules name.",
)
# The skill-scan teacher's one word per skill function (what its description is about), in a fixed
# vocabulary the student can learn once; a decoy skill is "none" (reports/stage1b.md, attempt 10).
_SKILL_GLOSS = {
    "product-qa": "product",
    "pricing-discounts": "prices",
    "after-sales-handoff": "orders",
    "casual-chat": "chat",
    "presentation-order": "switch",
    "faq-replies": "policy",
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")  # a dot inside a name ("obtain.vouchers") ends nothing
_NO_PLAN = {"casual_chat": "Small talk; reply warmly, no tools needed.", "other": "Off-topic; decline politely."}
_GOT_DATA = ("Results are in; answer with what the tools returned.", "I have the data now; keep it short and exact.")
_NO_DATA = ("The tools failed; don't guess, say I'll check.", "No data came back, so no numbers in the reply.")
_PROMO = ("{n} is {p} in the live deal (list {l}).", "Live price for {n}: {p}, down from {l}.")
_OPENERS = ("Great question!", "Sure!", "Good eye!", "Happy to help!", "")
_CLOSERS = ("Any other questions?", "Grab it while it's live!", "Just ask if you need more!", "")
_SORRY = ("Sorry about that!", "So sorry to hear that!", "Oh no, sorry!")
_HANDOFF = (
    "I've opened ticket {ticket}; customer service will message you privately.",
    "Customer service has ticket {ticket} and will reach out to you privately.",
    "Ticket {ticket} is open, and our service team will message you privately.",
)
_SWITCHED = ("Here it is: {name} is on screen now!", "Switched! {name} is up now.", "Done, {name} is on screen.")
_CHAT = (
    "Hi and welcome! Check out the {name}!",
    "Thanks so much! The {name} is up now.",
    "Aw, thank you! Enjoy the {name}!",
)
_DECLINE = ("Sorry, I can only help with the products in this stream!", "I'm not able to answer that one, sorry!")
_CHECK = (
    "Let me check that and get back to you!",
    "Give me a moment to check that for you!",
    "I'll check and come back!",
)
_PARTIAL = ("I'll check the rest and get back to you!", "Let me check on the rest for you.")


# -- the harness as the policy sees it: every name looked up by function id ---------------------------
def _live(items: Sequence[Skill | ToolSpec], function_id: str) -> Skill | ToolSpec | None:
    """The item serving ``function_id``, never a decoy."""
    return next((i for i in items if i.function_id == function_id and not i.metadata.get("decoy")), None)


def _named_call(harness: Harness, gold: GoldCall, comments: Sequence[str]) -> ToolCall | None:
    """A gold call under the harness's current tool and parameter names (``None``: no such tool). A
    free-text argument left open (``None``) gets the comments, as the gold was verified with."""
    tool = _live(harness.tools, gold.function_id)
    if not isinstance(tool, ToolSpec):
        return None
    rename = dict(tool.metadata.get("param_map") or {})
    free = _FREE_TEXT.get(gold.function_id)
    args = {**gold.arguments, **({free: " ".join(comments)} if free and gold.arguments.get(free) is None else {})}
    return ToolCall(tool.name, {str(rename.get(k, k)): v for k, v in args.items() if v is not None})


def _reference(comments: Sequence[str], product_id: str, catalog: Catalog, display: str | None) -> str | None:
    """The viewer's own words for ``product_id`` that the tools resolve back to it
    (``catalog.find_product``, the display winning ties, as the tools do): the longest run of words
    that each match the product (name, alias, brand, category, colour; typos included), else the
    shortest run of any words; the first text of ``comments`` with such a run wins; ``None`` when
    none has one."""
    product = catalog.product(product_id)
    if product is None:
        return None
    index = product_index(product)
    resolves = lambda phrase: (catalog.find_product(phrase, prefer=display) or {}).get("id") == product_id  # noqa: E731
    for text in comments:
        words = re.findall(r"[\w'&-]+", text)
        own = [any(token_score(t, index, fuzzy=True) > 0 for t in tokens(w)) for w in words]
        runs = [(i, j) for i in range(len(words)) for j in range(i + 1, len(words) + 1) if all(own[i:j])]
        named = [" ".join(words[i:j]) for i, j in sorted(runs, key=lambda r: (r[0] - r[1], r[0]))]
        spans = [(i, i + n) for n in range(1, min(_MAX_REF_WORDS, len(words)) + 1) for i in range(len(words) - n + 1)]
        for phrase in [*named, *(" ".join(words[i:j]) for i, j in spans)]:
            if resolves(phrase):
                return phrase
    return None


def _step_word(room: dict[str, Any], product_id: str) -> str | None:
    """The word of "previous" / "next" / "first" / "last" that ``switch_product_link`` (through
    :func:`~hat.env.livestream_tools.step_in_order`) takes to ``product_id`` in ``room``, else ``None``."""
    from hat.env.livestream_tools import step_in_order

    order, current = [str(p) for p in room.get("order", [])], room.get("on_display")

    def lands(word: str) -> bool:
        try:
            return step_in_order(word, order, current) == product_id
        except ValueError:
            return False

    return next((w for w in ("previous", "next", "first", "last") if lands(w)), None)


def _need(gold: GoldCall) -> str:
    """What a gold call answers, in the teacher's words, with the product as the model can name it."""
    need = _NEEDS.get(gold.function_id, gold.function_id.replace("_", " "))
    product = gold.arguments.get("product")
    return f"{need} of {product}" if isinstance(product, str) and gold.function_id != "switch_product_link" else need


def _skill_call(harness: Harness, function_id: str) -> ToolCall | None:
    skill = _live(harness.skills, function_id)
    return None if skill is None else ToolCall(harness.output.skill_tool, {"name": skill.name})


# -- reading the conversation ------------------------------------------------------------------------
@dataclass
class _Seen:
    """One call made so far and what came back (``status`` None: not observed yet)."""

    call: ToolCall
    status: str | None = None
    result: Any = None


@dataclass
class _State:
    rounds: int = 0
    calls: list[_Seen] = field(default_factory=list)
    last_reply: dict[str, Any] | None = None
    feedback: list[str] = field(default_factory=list)
    rejections: int = 0
    prompt: str = ""
    grounding: str = ""


def _observation(content: str) -> tuple[str, Any]:
    match = _TOOL_RESPONSE.search(content)
    try:
        data = json.loads(match.group(1) if match else content)
    except json.JSONDecodeError:
        return "error", None
    return (str(data.get("status", "ok")), data.get("result")) if isinstance(data, dict) else ("ok", data)


def _read(messages: Sequence[Message], history: int, view: Harness) -> _State:
    """Replay the conversation after the viewer's message into calls, observations and feedback."""
    start = 1 + history  # the viewer's message follows the system prompt and the history ...
    if not (start < len(messages) and messages[start].get("role") == "user"):  # ... unless a hook moved it
        start = next((i for i, m in enumerate(messages) if m.get("role") == "user" and "comment" in str(m)), 0)
    prompt = str(messages[0].get("content", "")) if messages else ""
    state = _State(prompt=prompt, grounding=prompt)
    pending: list[_Seen] = []
    for message in messages[start + 1 :]:
        role, content = message.get("role"), str(message.get("content", ""))
        if role == "assistant":
            state.rounds += 1
            parsed = parse_output(content, view.output.reply_field)
            pending = [_Seen(c) for c in parsed.tool_calls]
            state.calls += pending
            state.last_reply, state.feedback = parsed.reply, []
        elif role == "tool" and pending:
            seen = pending.pop(0)
            seen.status, seen.result = _observation(content)
            if seen.status == "ok" and seen.call.name != view.output.skill_tool:
                state.grounding += "\n" + json.dumps(seen.result, ensure_ascii=False, default=str)
        elif role == "user":
            if state.last_reply is not None and not state.feedback:
                state.rejections += 1  # the first feedback after a reply: that reply was rejected
            state.feedback.append(content)
    return state


def _is_empty(result: Any) -> bool:
    """An answer without data: nothing, an empty ``results`` list, or only a note."""
    if isinstance(result, dict) and result:
        return ("results" in result and not result["results"]) or set(result) <= {"note", "empty", "query", "message"}
    return not result


@dataclass
class _Compose:
    """One reply's inputs: episode, conversation, verified (function id, result) pairs, limits, taboos."""

    episode: Episode
    state: _State
    rng: random.Random
    results: list[tuple[str, dict[str, Any]]]
    product: dict[str, Any] | None
    limit: int
    banned: set[str] = field(default_factory=set)
    rules: list[re.Pattern[str]] = field(default_factory=list)  # operators' settings.reply_rules patterns
    unresolved: bool = False  # a planned call never gave data: say so
    compact: bool = False
    rewrites: list[tuple[re.Pattern[str], str]] = field(default_factory=list)  # rules' oracle_rewrites
    facts_first: bool = False  # sentences stating a gold fact before the rest (the answer teacher)


# -- facts from tool results -------------------------------------------------------------------------
def _num(value: Any) -> str:
    """A number exactly as the tool's JSON printed it (49.9, 45.0, 0)."""
    return json.dumps(value) if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def _money(value: Any, currency: Any = "USD") -> str:
    return f"${_num(value)}" if currency in (None, "USD") else f"{_num(value)} {currency}"


def _price_lines(r: dict[str, Any], ctx: _Compose) -> list[str]:
    name, cur = r.get("name", "It"), r.get("currency")
    if r.get("promo_active") and r.get("promo_price") is not None:
        return [ctx.rng.choice(_PROMO).format(n=name, p=_money(r["promo_price"], cur), l=_money(r.get("price"), cur))]
    return [f"{name} is {_money(r.get('price'), cur)}."]


def _stock_lines(r: dict[str, Any], ctx: _Compose) -> list[str]:
    variant = " ".join(str(x) for x in (r.get("color"), r.get("size")) if x)
    where = f" in {variant}" if variant else ""
    if r.get("qty"):
        return [ctx.rng.choice(("We have {q} left{w}.", "{q} in stock{w}!")).format(q=_num(r["qty"]), w=where)]
    return [f"Sorry, it's sold out{where}."]


def _specs_lines(r: dict[str, Any], ctx: _Compose) -> list[str]:
    specs: dict[str, Any] = r.get("specs") or {}
    text = {k: ", ".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in specs.items()}
    keys = [k for k, v in text.items() if _has_fact(v, ctx.episode.gold.facts)]
    asked = set(re.findall(r"[a-z]+", " ".join(ctx.episode.comments).lower()))
    keys = keys or [k for k in text if set(k.split("_")) & asked] or list(text)[:2]
    return [f"{k.replace('_', ' ').capitalize()}: {text[k]}." for k in keys[:3]]


def _discount_lines(r: dict[str, Any], ctx: _Compose) -> list[str]:
    coupons = list(r.get("coupons") or [])
    wanted = [c for c in coupons if _has_fact(json.dumps(c, ensure_ascii=False), ctx.episode.gold.facts)]
    reached = [c for c in coupons if c.get("reached_with_one_unit", True)]
    best = sorted(wanted or reached, key=lambda c: -float(c.get("discount") or 0))
    lines = [_price_lines({**r, "promo_active": True}, ctx)[0]] if r.get("promo_price") is not None else []
    lines += [f"Use code {c['code']}: {c.get('description', '')}." for c in best[:2]]
    return lines or ["No coupon applies to this one right now."]


def _shipping_lines(r: dict[str, Any], ctx: _Compose) -> list[str]:
    fee = f", shipping {_money(r['fee'])}" if r.get("fee") else " with free shipping"
    free = f", free over {_money(r['free_over'])}" if r.get("fee") and r.get("free_over") else ""
    lines = [f"It ships in {_num(r.get('ships_in_days'))} days{fee}{free}."]
    if r.get("region"):
        lines.append(f"It {'ships' if r.get('ships_to_region') else 'does not ship'} to {r['region']}.")
    if r.get("return_policy") and re.search(r"return|refund|exchange", " ".join(ctx.episode.comments), re.I):
        lines.append(f"Returns: {r['return_policy']}.")
    return lines


def _faq_lines(r: dict[str, Any], ctx: _Compose) -> list[str]:
    results = r.get("results") or []
    hits = [h for h in results if _has_fact(str(h.get("answer", "")), ctx.episode.gold.facts)]
    return [str((hits or results)[0]["answer"])] if results else []


_LINES: dict[str, Callable[[dict[str, Any], _Compose], list[str]]] = {
    "get_price": _price_lines,
    "get_stock": _stock_lines,
    "get_specs": _specs_lines,
    "get_discount_rules": _discount_lines,
    "get_shipping": _shipping_lines,
    "search_faq": _faq_lines,
    "switch_product_link": lambda r, ctx: [ctx.rng.choice(_SWITCHED).format(name=r.get("name"))],
    "handoff_to_service": lambda r, ctx: [ctx.rng.choice(_HANDOFF).format(ticket=r.get("ticket_id"))],
}


# -- writing the reply -------------------------------------------------------------------------------
def _mentions(text: str, fact: str) -> bool:
    """Whether ``text`` states ``fact``: a number as a whole number, as the hook and the judges read
    numbers ("3" is not in "30", "1299" is in "$1,299"), else any case."""
    return mentions_number(text, fact) if is_number(fact) else fact.lower() in text.lower()


def _has_fact(text: str, facts: Sequence[str]) -> bool:
    return any(_mentions(text, f) for f in facts)


def _prompt_sentence(fact: str, prompt: str) -> str | None:
    """The shortest sentence of the prompt that states ``fact`` (e.g. an FAQ answer)."""
    pieces = [p.strip() for p in re.split(r"(?<=[.!?])\s+|\n|\bQ: |\bA: ", prompt)]
    found = sorted((p for p in pieces if p and len(p) <= 120 and _mentions(p, fact)), key=len)
    return found[0] if found else None


def _leaf_sentence(fact: str, source: Any, key: str = "") -> str | None:
    """A readable sentence for a gold fact found somewhere in a result ("Material: 100% viscose.")."""
    if isinstance(source, dict):
        return next((s for k, v in source.items() if (s := _leaf_sentence(fact, v, str(k)))), None)
    if isinstance(source, list):
        return next((s for v in source if (s := _leaf_sentence(fact, v, key))), None)
    text = _num(source)
    if not _mentions(text, fact):
        return None
    return f"{key.replace('_', ' ').capitalize()}: {text}." if key and len(text) <= 80 else text.rstrip(".!?") + "."


def _core(ctx: _Compose) -> list[str]:
    """Fact sentences from the results, then one for each verified gold fact they missed."""
    lines = [line for fid, r in ctx.results for line in _LINES.get(fid, lambda *_: [])(r, ctx)]
    product = ctx.product or {}
    shown = {k: product.get(k) for k in ("name", "brand", "category", "specs")}  # what the prompt shows
    sources: list[Any] = [r for _, r in ctx.results] + [shown]
    observed = json.dumps([r for _, r in ctx.results], ensure_ascii=False)
    for fact in ctx.episode.gold.facts:
        # a bare number is stated only when a tool returned it: in the prompt it may be anything
        where = observed if is_number(fact) else ctx.state.grounding
        if _mentions(" ".join(lines), fact) or not _mentions(where, fact):
            continue
        extra = next((s for src in sources if (s := _leaf_sentence(fact, src))), None)
        lines.append(extra or _prompt_sentence(fact, ctx.state.prompt) or f"{fact}.")
    return list(dict.fromkeys(lines))


def _rules(harness: Harness, intent: str) -> list[re.Pattern[str]]:
    """The ``forbid_patterns`` of the reply rules that apply to ``intent`` (a bad regex: literal)."""
    out = []
    for rule in harness.settings.get("reply_rules") or []:
        for pattern in map(str, rule.get("forbid_patterns", []) if intent in (rule.get("intents") or [intent]) else []):
            try:
                out.append(re.compile(pattern, re.IGNORECASE))
            except re.error:
                out.append(re.compile(re.escape(pattern), re.IGNORECASE))
    return out


def _rewrites(harness: Harness, intent: str) -> list[tuple[re.Pattern[str], str]]:
    """The ``oracle_rewrites`` of applicable reply rules: how a privileged policy complies."""
    out = []
    for rule in harness.settings.get("reply_rules") or []:
        if intent in (rule.get("intents") or [intent]):
            out += [(re.compile(str(p), re.IGNORECASE), str(r)) for p, r in rule.get("oracle_rewrites", [])]
    return out


def _rewrite(text: str, ctx: _Compose) -> str:
    for pattern, replacement in ctx.rewrites:
        text = " ".join(pattern.sub(replacement, text).split())
    return text


def _allowed(sentence: str, ctx: _Compose) -> bool:
    lowered = sentence.lower()
    if any(b.lower() in lowered for b in ctx.banned) or any(p.search(sentence) for p in ctx.rules):
        return False
    return _grounded(sentence, ctx.state.grounding)


def _grounded(sentence: str, grounding: str) -> bool:
    """Every number of ``sentence`` occurs in ``grounding`` (the prompt and the tool results): the
    check the ``grounded_claims`` hook makes, so a reply the oracle writes is one it accepts."""
    return not Grounding.of([grounding]).unsupported(sentence)


def _body(ctx: _Compose) -> tuple[str, list[str], str]:
    """(opener, core sentences, closer) for the intent."""
    rng, gold, intent = ctx.rng, ctx.episode.gold, ctx.episode.gold.intent
    name = (ctx.product or {}).get("name", "")
    by_fid = {fid for fid, _ in ctx.results}
    if intent == "after_sales":
        core = _core(ctx) if "handoff_to_service" in by_fid else ["Customer service will message you privately."]
        return rng.choice(_SORRY), core, ""
    if intent == "order_change" and "switch_product_link" in by_fid:
        return "", _core(ctx), rng.choice(("Ask me anything about it!", ""))
    if intent == "casual_chat":  # short: small talk longer than 3/4 of the limit reads as a lecture
        fits = [t.format(name=name) for t in _CHAT if name and len(t.format(name=name)) <= 0.75 * ctx.limit]
        return "", [rng.choice(fits) if fits else "Thanks for being here!"], ""
    core = _core(ctx)
    if intent == "other" or (not gold.answerable and not core):
        return "", [rng.choice(_DECLINE)], ""
    if not core:
        return "", [rng.choice(_CHECK)], ""
    if ctx.unresolved:
        core.append(rng.choice(_PARTIAL))
    opener = rng.choice(("Thanks everyone!", *_OPENERS) if len(ctx.episode.comments) > 1 else _OPENERS)
    if not gold.answerable:
        opener = "I can't confirm that one, but here's what I know:"
    return opener, core, rng.choice(_CLOSERS)


def _compose_reply(ctx: _Compose) -> str:
    """The fullest reply that fits and breaks no rule: drop closer, opener, fact-less sentences; then cut."""
    opener, core, closer = _body(ctx)
    opener, closer, core = _rewrite(opener, ctx), _rewrite(closer, ctx), [_rewrite(s, ctx) for s in core]
    core = [s for s in core if _allowed(s, ctx)] or [ctx.rng.choice(_CHECK)]
    opener, closer = (opener if _allowed(opener, ctx) else ""), (closer if _allowed(closer, ctx) else "")
    if ctx.compact:
        opener = closer = ""
    if ctx.facts_first:  # what was asked first: a student copying the first sentence copies the answer
        core = sorted(core, key=lambda s: not _has_fact(s, ctx.episode.gold.facts))
    keep = [s for s in core if _has_fact(s, ctx.episode.gold.facts) or s in _PARTIAL] or core[:1]
    for parts in ([opener, *core, closer], [opener, *core], [*core, closer], core, keep):
        text = " ".join(p for p in parts if p)
        if len(text) <= ctx.limit and _allowed(text, ctx):
            return text
    text = " ".join(keep)
    for rule in ctx.rules:  # a rule no sentence escapes (say, no "!"): take the offending text out
        text = " ".join(rule.sub("", text).split())
    text = text if len(text) <= ctx.limit else text[: max(1, ctx.limit - 1)].rsplit(" ", 1)[0] + "…"
    return text or "Thanks for asking"


# -- the policy --------------------------------------------------------------------------------------
class _Policy:
    """Model-protocol plumbing: :meth:`output` gives the next text; stop strings cut it like a backend's."""

    name = "policy"

    def __init__(self, episode: Episode, harness: Harness, *, seed: int = 0) -> None:
        self.episode = episode
        self.harness = harness
        self.seed = seed
        self.view = harness  # where names come from: the current harness (the memoriser: production)
        self._prompt = ""  # the system prompt, read by :meth:`OracleModel.output`
        self._refs: dict[str, str | None] = {}  # product id -> the viewer's words for it (or None)

    def rng(self, round_index: int) -> random.Random:
        return random.Random(f"{self.seed}:{self.episode.episode_id}:{round_index}")

    def output(self, messages: Sequence[Message]) -> str:
        raise NotImplementedError

    def generate(
        self, messages: Sequence[Message], config: GenerationConfig | None = None, *, cache_key: str | None = None
    ) -> Generation:
        text, _ = truncate_at_stop(self.output(messages), (config or GenerationConfig()).stop)
        prompt = sum(len(str(m.get("content", "")).split()) for m in messages)
        return Generation(text=text, prompt_tokens=prompt, completion_tokens=len(text.split()), ttft_s=0.0)

    def stream(
        self, messages: Sequence[Message], config: GenerationConfig | None = None, *, cache_key: str | None = None
    ) -> Iterator[str]:
        return iter(word_pieces(self.generate(messages, config, cache_key=cache_key).text))

    def reply(self, text: str, think: str = "") -> str:
        head = f"<think>{think}</think>\n" if think else ""
        return head + render_reply({self.view.output.reply_field: text})

    def on_display(self) -> dict[str, Any] | None:
        pid = self.episode.room.get("on_display")
        return world_catalog(self.episode.world_seed).product(str(pid)) if pid else None


class OracleModel(_Policy):
    """The privileged expert (module docstring). ``use_tools=False`` answers from the prompt only."""

    name = "oracle"
    use_tools = True

    def output(self, messages: Sequence[Message]) -> str:
        state = _read(messages, len(self.episode.history), self.view)
        self._prompt = state.prompt
        rng = self.rng(state.rounds)
        if state.rounds == 0:
            return self.first_round(state, rng)
        if state.last_reply is not None and state.feedback:
            return self.repair(state, rng)
        retry = self.retries(state)
        if retry and state.rounds + 1 < self.harness.limits.max_rounds:
            think = f"{retry[0].name} failed or came back empty; trying again."
            return f"<think>{think}</think>\n" + "\n".join(render_tool_call(c) for c in retry)
        ctx = self.context(state, rng)
        text = _compose_reply(ctx)
        return self.reply(text, self.reply_thought(ctx, text))

    def reply_thought(self, ctx: _Compose, text: str) -> str:
        """The reply round's rationale: one of two fixed sentences, with or without data."""
        return ctx.rng.choice(_NO_DATA if self.planned() and not ctx.results else _GOT_DATA)

    def planned(self) -> list[tuple[str, ToolCall]]:
        """(function id, call under the view's names) per gold call whose tool the view has."""
        gold = self.episode.gold.tool_calls if self.use_tools else ()
        calls = ((g.function_id, _named_call(self.view, self.visible_gold(g), self.episode.comments)) for g in gold)
        return [(f, c) for f, c in calls if c]

    def visible_gold(self, gold: GoldCall) -> GoldCall:
        """``gold`` as a model can make it: a product id that appears nowhere in what the model sees
        before its first step (system prompt, history, comments) is replaced by the words the
        comments (else the latest history turn) use for the product, which the tools resolve to the
        same id (:func:`_reference`). Without this the teacher would pass ids only the simulator
        knows, and a student trained on its rows learns to invent ids ("p-battery-06" for "rc car
        battery life")."""
        pid = gold.arguments.get("product")
        said = [*self.episode.comments, *(str(m.get("content", "")) for m in reversed(self.episode.history))]
        if not isinstance(pid, str) or any(pid in text for text in [self._prompt, *said]):
            return gold
        if pid not in self._refs:
            catalog = world_catalog(self.episode.world_seed)
            self._refs[pid] = _reference(said, pid, catalog, self.episode.room.get("on_display"))
            if self._refs[pid] is None and gold.function_id == "switch_product_link":
                self._refs[pid] = _step_word(self.episode.room, pid)  # "go back": the tool takes "previous"
        ref = self._refs[pid]
        return gold if ref is None else GoldCall(gold.function_id, {**gold.arguments, "product": ref})

    def first_round(self, state: _State, rng: random.Random) -> str:
        intent = self.episode.gold.intent
        skills, planned = self.skill_calls(), self.planned()
        if not skills and not planned:
            return self.reply(
                _compose_reply(self.context(state, rng)), _NO_PLAN.get(intent, "I can answer this from the prompt.")
            )
        needs = self.needs(planned) or [intent.replace("_", " ")]
        think = rng.choice(_PLANS).format(
            needs="; ".join(needs),
            skills=", ".join(str(c.arguments["name"]) for c in skills) or "no skill",
            tools=", ".join(dict.fromkeys(c.name for _, c in planned)) or "no tool",
        )
        return f"<think>{think}</think>\n" + "\n".join(render_tool_call(c) for c in [*skills, *(c for _, c in planned)])

    def skill_calls(self) -> list[ToolCall]:
        """The gold skills' loads under the view's names (none when the policy uses no tools)."""
        if not self.use_tools:
            return []
        return [c for f in self.episode.gold.skills if (c := _skill_call(self.view, f))]

    def needs(self, planned: list[tuple[str, ToolCall]]) -> list[str]:
        """What the planned calls answer, in the teacher's words (:func:`_need`), once each."""
        asked = {f for f, _ in planned}
        gold = [self.visible_gold(g) for g in self.episode.gold.tool_calls if g.function_id in asked]
        return list(dict.fromkeys(map(_need, gold)))

    def retries(self, state: _State) -> list[ToolCall]:
        """Planned calls whose latest observation failed or was empty, with retries left."""
        out = []
        for _, call in self.planned():
            seen = [s for s in state.calls if s.call == call and s.status is not None]
            last = seen[-1] if seen else _Seen(call)
            failed = last.status in ("timeout", "error") or (last.status == "ok" and _is_empty(last.result))
            if failed and len(seen) <= MAX_TOOL_RETRIES:
                out.append(call)
        return out

    def results(self, state: _State) -> list[tuple[str, dict[str, Any]]]:
        """(function id, latest good result) per planned call, in plan order."""
        out = []
        for function_id, call in self.planned():
            good = [s.result for s in state.calls if s.call == call and s.status == "ok" and not _is_empty(s.result)]
            if good and isinstance(good[-1], dict):
                out.append((function_id, good[-1]))
        return out

    def context(self, state: _State, rng: random.Random, *, limit: int | None = None) -> _Compose:
        hook_phrases = [str(p) for h in self.harness.hooks for p in h.config.get("forbidden_phrases", [])]
        limit = limit or self.view.limits.reply_max_chars
        banned = {*self.episode.gold.forbidden, *hook_phrases}
        rules = _rules(self.harness, self.episode.gold.intent)
        results = self.results(state)
        unresolved = len(results) < len(self.planned())
        rewrites = _rewrites(self.harness, self.episode.gold.intent)
        return _Compose(
            self.episode, state, rng, results, self.on_display(), limit, banned, rules, unresolved, rewrites=rewrites
        )

    def repair(self, state: _State, rng: random.Random) -> str:
        """Answer a rejected reply: obey a stated limit, drop a flagged number or phrase, go compact."""
        feedback = " ".join(state.feedback)
        limit = min([self.view.limits.reply_max_chars, *map(int, re.findall(r"limit is (\d+)", feedback))])
        ctx = self.context(state, rng, limit=max(20, int(limit * 0.9 ** (state.rejections - 1))))
        ctx.compact = True
        ctx.banned |= {*re.findall(r"number (\S+) is not", feedback), *re.findall(r"promise '([^']+)'", feedback)}
        return self.reply(_compose_reply(ctx), "The reply was rejected; fix it and keep only verified facts.")


class SkillFirstOracle(OracleModel):
    """The oracle in two steps where the harness allows it: the first round only loads the gold skills
    ("Asked: units in stock. Plan: load product-qa first; its rules name the tool."), the next one
    quotes the loaded rule that names each planned tool ("Rule: Stock by color or size: invoke
    `find_lagerbestand` with the color and size the viewer named.") and calls it, then the reply.

    Why (reports/stage1b.md, attempt 9): models trained on the one-round oracle state what is asked
    as well under held-out renames as on the production harness but then name the wrong tool, because
    the name must be matched against the tool catalogue's (rewritten) descriptions; the skill's rules
    name the tool beside the need's own words, in text the model has just read. Episodes without a
    skill or a tool, and harnesses with fewer than three rounds, get the one-round oracle."""

    name = "skill-first"

    def output(self, messages: Sequence[Message]) -> str:
        state = _read(messages, len(self.episode.history), self.view)
        self._prompt = state.prompt
        if state.rounds == 1 and self._deferred(state):
            return self.tool_round(state)
        return super().output(messages)

    def first_round(self, state: _State, rng: random.Random) -> str:
        skills, planned = self.skill_calls(), self.planned()
        if not skills or not planned or self.harness.limits.max_rounds < 3:
            return super().first_round(state, rng)
        needs = self.needs(planned)
        names = ", ".join(str(c.arguments["name"]) for c in skills)
        think = rng.choice(_SKILL_FIRST).format(needs="; ".join(needs), skills=names)
        return f"<think>{think}</think>\n" + "\n".join(render_tool_call(c) for c in skills)

    def _deferred(self, state: _State) -> bool:
        """After a first round that only loaded skills, with tools still to call."""
        skill_tool = self.view.output.skill_tool
        return bool(state.calls) and all(s.call.name == skill_tool for s in state.calls) and bool(self.planned())

    def tool_round(self, state: _State) -> str:
        rules = [str(s.result) for s in state.calls if s.status == "ok" and s.result]
        quotes: list[str] = []
        for function_id, call in self.planned():
            quote = next((q for text in rules if (q := _naming_rule(text, call.name))), None)
            if quote is None:
                gold = next(g for g in self.episode.gold.tool_calls if g.function_id == function_id)
                quote = f"No rule names it; the tool for {_need(self.visible_gold(gold))} is {call.name}."
            else:
                quote = f"Rule: {quote}"
            if quote not in quotes:
                quotes.append(quote)
        calls: list[ToolCall] = []
        for _, call in self.planned():
            if call not in calls:
                calls.append(call)
        return f"<think>{' '.join(quotes[:2])}</think>\n" + "\n".join(render_tool_call(c) for c in calls)


def _naming_rule(skill_text: str, tool_name: str) -> str | None:
    """The sentence of a loaded skill's rules that names ``tool_name`` (as `name` or a whole word),
    without its list marker ("3. Note - "), else ``None``."""
    word = re.compile(rf"(?<![\w.-]){re.escape(tool_name)}(?![\w-])")
    for line in skill_text.splitlines():
        body = re.sub(r"^\s*(?:[-*]|\d+[.)])\s*(?:(?:Note|Policy|Must|Rule)\s*[-:]\s*)?", "", line).strip()
        for sentence in _SENTENCE_END.split(body):
            if word.search(sentence):
                return " ".join(sentence.split())
    return None


class SkillScanOracle(SkillFirstOracle):
    """The skill-first oracle whose first rationale reads the skill catalogue before choosing: after
    "Asked: ..." it lists every skill the prompt shows, in the prompt's order, as one fixed word for
    what its description is about and the name beside it ("Skills: orders=complaint-desk,
    chat=plaudern, product=s-f."), then the choice in the same form ("Need: product=s-f.").

    Why (reports/stage1b.md, attempt 10): models trained on the other teachers state what is asked as
    well under held-out renames as on the production harness, then write a wrong or unseen skill name
    (``s-e`` for shipping, ``preise-rabatte`` for earbud specs): the name had to be matched against
    the descriptions in one step. Here each step is local: a gloss from the description just read,
    the name beside it, and at the end the name that follows the needed gloss in the model's own
    list, the copy pattern small models learn first. The rest is :class:`SkillFirstOracle`."""

    name = "skill-scan"

    def first_round(self, state: _State, rng: random.Random) -> str:
        text = super().first_round(state, rng)
        skills = self.skill_calls()
        needs = self.needs(self.planned()) or [self.episode.gold.intent.replace("_", " ")]
        asked = f"<think>Asked: {'; '.join(needs)}."
        listed = self.catalogue(state.prompt)
        if not skills or not listed or not text.startswith(asked):
            return text
        gloss = {name: word for word, name in listed}
        scan = ", ".join(f"{word}={name}" for word, name in listed)
        need = ", ".join(f"{gloss.get(n, 'skill')}={n}" for n in (str(c.arguments["name"]) for c in skills))
        calls = text.split("</think>", 1)[1]
        made = parse_output(calls, "text").tool_calls
        tools = [c.name for c in made if c.name != self.view.output.skill_tool]
        if len(made) == len(skills) and self.planned():
            then = "; its rules name the tool."  # the skill-first round: tools after its rules
        else:
            then = f". Then {', '.join(dict.fromkeys(tools))}." if tools else ". No tool needed."
        return f"{asked} Skills: {scan}. Need: {need}{then}</think>{calls}"

    def catalogue(self, prompt: str) -> list[tuple[str, str]]:
        """(gloss, name) per skill of the view listed in ``prompt`` ("- name: ..."), in prompt order."""
        found = []
        for skill in self.view.skills:
            at = prompt.find(f"- {skill.name}: ")
            if at >= 0:
                word = "none" if skill.metadata.get("decoy") else _SKILL_GLOSS.get(skill.function_id)
                found.append((at, word or skill.function_id.split("-")[0], skill.name))
        return [(word, name) for _, word, name in sorted(found)]


class SkillScanArgsOracle(SkillScanOracle):
    """The skill-scan oracle whose tool round also copies each called tool's argument names from the
    prompt's tool list after the rule that names it ("Rule: Shipping time, fee or region: call
    `pull.postage`. Args: pull.postage(goods_ref?, market?)." for the prompt line
    ``- pull.postage(goods_ref?: string, market?: string): …``), so the argument names of the call
    that follows are written where the model has just copied them. The types are left out: the names
    and the ``?`` of optional ones are what a call needs, and the report's q(L) counts every token of
    reasoning past 100 (the full line costs ~8 more per tool).

    Why (reports/stage1b.md, attempt 11): the skill-scan students choose the right skill and the
    right tool under held-out renames, then write an argument name the harness does not have — the
    production one (``product``, ``query``) or a train-split rename (``item``): 16–21 of the 100 T2
    episodes have a call rejected for its argument names, none of T1's. The names had to be matched
    against a tool line read ~1,000 tokens earlier; here they are copied once into the rationale, the
    copy pattern the skill and tool names already learnt. The rest is :class:`SkillScanOracle`."""

    name = "skill-scan-args"

    def tool_round(self, state: _State) -> str:
        text = super().tool_round(state)
        think, calls = text.split("</think>", 1)
        names = dict.fromkeys(c.name for _, c in self.planned())
        lines = [line for name in names if (line := _argument_names(state.prompt, self.view, name))]
        if not lines:
            return text
        return f"{think} Args: {'; '.join(lines)}.</think>{calls}"


def _argument_names(prompt: str, view: Harness, name: str) -> str | None:
    """``name(arg?, arg, ...)``: the tool's argument names in the order the prompt's compact tool list
    shows them (``?`` = optional); for a prompt that lists the tools another way (JSON schemas), in
    the view's schema order; ``None`` for a tool the view does not have."""
    found = re.search(rf"^- {re.escape(name)}\(([^)\n]*)\)", prompt, re.MULTILINE)
    if found:
        args = [part.split(":")[0].strip() for part in found.group(1).split(",") if part.strip()]
        return f"{name}({', '.join(args)})"
    tool = next((t for t in view.tools if t.name == name), None)
    if tool is None:
        return None
    params = tool.signature().get("parameters", {})
    required = set(params.get("required", []))
    args = [f"{arg}{'' if arg in required else '?'}" for arg in params.get("properties", {})]
    return f"{name}({', '.join(args)})"


class SkillScanAnswerOracle(SkillScanArgsOracle):
    """The skill-scan-args oracle whose reply round names the fields of the tool results that answer
    the comment before the reply ("Answer: code=LIVE10, threshold=80." where the older teachers wrote
    one fixed sentence, "Results are in; answer with what the tools returned."), and whose reply
    states the asked-for fact first ("Use code LIVE10: $10 off $80+. Live price for …").

    Why (reports/stage1m/demo/README.md, attempt 12): the students of the older teachers call the
    right tool and stay true to its result, then quote the wrong part of it — "any coupon today??"
    answered with the promo price from a ``get_discount_rules`` result that holds the coupon. Nothing
    in their rows shows *which* field answers: the rationale was the same for every intent and the
    reply put the price before the coupon. Here the choice is written down as a short copy step —
    ``key=value`` pairs read from the results the model has just seen, in the order the reply uses
    them — and the reply follows it. The rest is :class:`SkillScanArgsOracle`."""

    name = "skill-scan-answer"

    def context(self, state: _State, rng: random.Random, *, limit: int | None = None) -> _Compose:
        ctx = super().context(state, rng, limit=limit)
        ctx.facts_first = True
        return ctx

    def reply_thought(self, ctx: _Compose, text: str) -> str:
        thought = super().reply_thought(ctx, text)
        fields = _answer_fields(text, [r for _, r in ctx.results]) if thought in _GOT_DATA else []
        return f"Answer: {', '.join(fields)}." if fields else thought


_ANSWER_SKIP = {"name", "currency", "product", "product_id", "id", "ok", "status"}  # named only when alone
_ANSWER_NEVER = {"score", "rank"}  # retrieval bookkeeping, never what a viewer asked


def _leaves(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(key, scalar) for every leaf of a tool result, depth first; a list item keeps its list's key."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v, key)
    elif key and value is not None and not isinstance(value, bool):
        yield key, value


def _answer_fields(reply: str, results: Sequence[dict[str, Any]], *, most: int = 3) -> list[str]:
    """``key=value`` for the result fields ``reply`` states, in the order it states them (at most
    ``most``; a value longer than 32 characters by its key alone; the product's name only when
    nothing else is stated, as for a switch)."""
    found: dict[str, int] = {}
    for key, value in (leaf for r in results for leaf in _leaves(r)):
        text = _num(value)
        if key in _ANSWER_NEVER or (len(text) < 2 and not is_number(text)):
            continue
        if is_number(text):  # as the judges read numbers: "3" is not in "30", "1299" is in "$1,299"
            hit = re.search(rf"(?<![\d.]){re.escape(text)}(?![\d])", reply)
            at = (hit.start() if hit else len(reply)) if mentions_number(reply, text) else -1
        else:
            hit = re.search(rf"(?<!\w){re.escape(text)}(?!\w)", reply, re.IGNORECASE)
            at = hit.start() if hit else -1
        if at < 0:
            continue
        item = f"{key}={text}" if len(text) <= 32 else key
        if item not in found:
            found[item] = at + (10_000 if key in _ANSWER_SKIP else 0)
    named = sorted(found, key=lambda k: found[k])
    plain = [k for k in named if found[k] < 10_000]
    return (plain or named)[:most]
