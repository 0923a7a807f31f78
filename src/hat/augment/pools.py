"""Name pools and paraphrase material for Harness-State Augmentation, split train / held-out.

Why a split: T2 (Harness-Variant QA) must test whether a policy *reads* the harness, not whether it
recalls the augmentations it was trained on. Every pool below has a ``train`` and a ``heldout``
part with no overlap — different concept words, verbs, naming styles, languages, description
paraphrases, feedback structures and decoys — and a test checks the parts are disjoint.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DECOY_SKILLS",
    "DECOY_SKILLS_WIDE",
    "DECOY_TOOLS",
    "FEEDBACK_TEMPLATES",
    "NONCE_SHARE",
    "NONCE_SYLLABLES",
    "PARAM_NAMES",
    "REPLY_FIELDS",
    "RULE_PREFIXES",
    "RULE_SYNONYMS",
    "SKILL_CONCEPTS",
    "SKILL_DESCRIPTIONS",
    "SKILL_DESCRIPTIONS_WIDE",
    "SKILL_TOOL_NAMES",
    "TOOL_CONCEPTS",
    "TOOL_DESCRIPTIONS",
    "TOOL_VERBS",
    "split",
]

Pool = dict[str, Any]


def split(pool: dict[str, Any], part: str) -> Any:
    """``pool[part]`` with a clear error for a bad split name."""
    if part not in ("train", "heldout"):
        raise ValueError(f"unknown split {part!r}; use 'train' or 'heldout'")
    return pool[part]


# -- tool names: verb + concept, in a naming style -------------------------------------------------
TOOL_VERBS: Pool = {
    "train": ["get", "fetch", "lookup", "check", "query"],
    "heldout": ["retrieve", "obtain", "read", "find", "pull"],
}
TOOL_CONCEPTS: dict[str, Pool] = {
    "get_price": {"train": ["price", "cost", "item_cost", "pricing"], "heldout": ["quote", "tag_price", "amount"]},
    "get_stock": {"train": ["stock", "inventory", "availability"], "heldout": ["units_left", "supply", "on_hand"]},
    "get_specs": {"train": ["specs", "details", "attributes"], "heldout": ["datasheet", "features", "properties"]},
    "get_discount_rules": {
        "train": ["discounts", "coupons", "promo_rules"],
        "heldout": ["deals", "vouchers", "offers"],
    },
    "get_shipping": {
        "train": ["shipping", "delivery_info", "dispatch"],
        "heldout": ["logistics", "postage", "freight"],
    },
    "search_faq": {"train": ["faq", "help_articles", "policy_answers"], "heldout": ["knowledge_base", "qa_bank", "kb"]},
    "switch_product_link": {
        "train": ["product_link", "showcase", "display_item"],
        "heldout": ["pinned_item", "spotlight", "cart_link"],
    },
    "handoff_to_service": {
        "train": ["service_ticket", "support_case", "agent_handoff"],
        "heldout": ["human_help", "escalation", "care_team"],
    },
}
# Other languages' words for the same concepts (train: Spanish; held-out: German).
TOOL_FOREIGN: dict[str, Pool] = {
    "get_price": {"train": ["precio"], "heldout": ["preis"]},
    "get_stock": {"train": ["existencias"], "heldout": ["lagerbestand"]},
    "get_specs": {"train": ["detalles"], "heldout": ["merkmale"]},
    "get_discount_rules": {"train": ["descuentos"], "heldout": ["rabatte"]},
    "get_shipping": {"train": ["envio"], "heldout": ["versand"]},
    "search_faq": {"train": ["preguntas"], "heldout": ["fragen"]},
    "switch_product_link": {"train": ["enlace"], "heldout": ["verlinkung"]},
    "handoff_to_service": {"train": ["soporte"], "heldout": ["kundendienst"]},
}
TOOL_STYLES: Pool = {
    "train": ["snake", "camel", "kebab", "code", "foreign"],
    "heldout": ["pascal", "upper_snake", "dotted", "code", "foreign"],
}
TOOL_CODES: Pool = {"train": "tool_{n}", "heldout": "T_{letter}"}

# -- skill names (Agent Skills rule: a-z, 0-9, single hyphens) ----------------------------------------
SKILL_CONCEPTS: dict[str, Pool] = {
    "product-qa": {
        "train": ["product-questions", "item-info", "product-help"],
        "heldout": ["goods-answers", "article-facts"],
    },
    "pricing-discounts": {
        "train": ["pricing", "price-and-coupons", "deal-rules"],
        "heldout": ["cost-talk", "voucher-guide"],
    },
    "after-sales-handoff": {
        "train": ["after-sales", "order-problems", "support-escalation"],
        "heldout": ["post-purchase", "complaint-desk"],
    },
    "casual-chat": {"train": ["small-talk", "chit-chat", "greetings"], "heldout": ["banter", "friendly-talk"]},
    "presentation-order": {
        "train": ["product-switching", "show-next", "lineup-control"],
        "heldout": ["running-order", "stage-queue"],
    },
    "faq-replies": {
        "train": ["store-policies", "faq-answers", "help-center"],
        "heldout": ["house-rules", "policy-desk"],
    },
}
SKILL_FOREIGN: dict[str, Pool] = {
    "product-qa": {"train": ["preguntas-producto"], "heldout": ["produktfragen"]},
    "pricing-discounts": {"train": ["precios"], "heldout": ["preise-rabatte"]},
    "after-sales-handoff": {"train": ["posventa"], "heldout": ["kundenservice"]},
    "casual-chat": {"train": ["charla"], "heldout": ["plaudern"]},
    "presentation-order": {"train": ["orden-productos"], "heldout": ["reihenfolge"]},
    "faq-replies": {"train": ["politicas"], "heldout": ["richtlinien"]},
}
SKILL_STYLES: Pool = {"train": ["concept", "code", "foreign"], "heldout": ["concept", "code", "foreign", "suffixed"]}
SKILL_CODES: Pool = {"train": "skill-{n}", "heldout": "s-{letter}"}
# Made-up words (train only): a name that means nothing can only be matched to its description, so a
# model trained on them has to read the catalogue instead of recalling names. Consonant-vowel
# syllables; no held-out name is of that shape (a test checks).
NONCE_SYLLABLES: Pool = {
    "train": [c + v for c in "bdfgklmnprstvz" for v in "aeiou"],
    "heldout": [],
}
NONCE_SHARE: Pool = {"train": 0.5, "heldout": 0.0}  # share of renamed tools/skills that get a made-up name

# -- parameters -------------------------------------------------------------------------------------
PARAM_NAMES: dict[str, Pool] = {
    "product": {"train": ["item", "product_id", "sku"], "heldout": ["article", "goods_ref"]},
    "color": {"train": ["colour", "shade"], "heldout": ["hue", "tint"]},
    "size": {"train": ["fit_size", "size_label"], "heldout": ["sizing", "garment_size"]},
    "region": {"train": ["country", "destination"], "heldout": ["ship_to", "market"]},
    "query": {"train": ["question", "search_text"], "heldout": ["q", "lookup_text"]},
    "reason": {"train": ["issue", "problem"], "heldout": ["complaint", "summary"]},
    "order_id": {"train": ["order_number", "order_ref"], "heldout": ["purchase_id", "receipt_no"]},
}

# -- descriptions: paraphrases that keep the meaning ---------------------------------------------
TOOL_DESCRIPTIONS: dict[str, Pool] = {
    "get_price": {
        "train": [
            "Current list price and promotion price of a product.",
            "Look up what a product costs right now, including any promo price.",
            "Returns the price (and live promo price, if any) for an item.",
        ],
        "heldout": [
            "Tells you the regular and discounted price of an article.",
            "Price check: regular amount plus the promotional amount when one is running.",
        ],
    },
    "get_stock": {
        "train": [
            "Units in stock, optionally for one color and/or size.",
            "How many units are left, filterable by color and size.",
            "Inventory count for a product, per color/size if given.",
        ],
        "heldout": [
            "Remaining quantity of an article; narrow it down by colour or size.",
            "Availability check: units on hand for a colour/size combination.",
        ],
    },
    "get_specs": {
        "train": [
            "Specifications of a product: material, sizes, colors, features.",
            "Product details such as material, dimensions, colors and features.",
            "Returns the attribute sheet of an item (material, fit, colors...).",
        ],
        "heldout": [
            "Full technical and material data of an article.",
            "Feature list and material facts for a product.",
        ],
    },
    "get_discount_rules": {
        "train": [
            "Coupons and promotion rules that apply to a product.",
            "Which coupon codes and deals are valid, and their conditions.",
            "Promotion and coupon conditions (thresholds, expiry) for an item.",
        ],
        "heldout": [
            "Active vouchers and their terms for an article.",
            "Lists the valid offers with minimum spend and expiry.",
        ],
    },
    "get_shipping": {
        "train": [
            "Shipping time, fees, regions and return policy of a product.",
            "Dispatch time, delivery fee, regions served and returns.",
            "Delivery information for an item: how fast it ships, cost, where.",
        ],
        "heldout": [
            "Logistics facts: dispatch days, postage, destinations, return terms.",
            "How and where an article is sent, at what fee, and how returns work.",
        ],
    },
    "search_faq": {
        "train": [
            "Search the store FAQ for policy answers.",
            "Find FAQ entries matching a question (payment, invoices, returns...).",
            "Looks up store policy answers in the FAQ.",
        ],
        "heldout": [
            "Query the knowledge base of store policies.",
            "Returns the best-matching help-centre answers for a question.",
        ],
    },
    "switch_product_link": {
        "train": [
            "Switch the product link shown on screen (id, name, or next/previous).",
            "Change which product is pinned on screen.",
            "Push another product's link to the viewers.",
        ],
        "heldout": [
            "Put a different article in the spotlight (by id, name, next or previous).",
            "Moves the on-screen shopping link to another product.",
        ],
    },
    "handoff_to_service": {
        "train": [
            "Hand the viewer over to human customer service with a ticket.",
            "Open a customer-service ticket for order problems.",
            "Escalate refunds, returns and order issues to a human agent.",
        ],
        "heldout": [
            "Creates a support case so a human agent follows up.",
            "Passes the viewer's order issue to the care team and returns a ticket id.",
        ],
    },
}
SKILL_DESCRIPTIONS: dict[str, Pool] = {
    "product-qa": {
        "train": [
            "Use for questions on a product's stock, colors, sizes, material, features or shipping.",
            "For viewer questions about an item's availability, sizes, colors, specs or delivery.",
        ],
        "heldout": ["Apply when someone asks about an article's stock, dimensions, colours, fabric or dispatch."],
    },
    "pricing-discounts": {
        "train": [
            "Use for questions on prices, deals, promo prices or coupon codes.",
            "For anything about cost, promotions and coupons.",
        ],
        "heldout": ["Apply to questions about how much something costs or which vouchers work."],
    },
    "after-sales-handoff": {
        "train": [
            "Use for order problems: refunds, returns, damaged, wrong or late items, complaints.",
            "For complaints and order issues that customer service must handle.",
        ],
        "heldout": ["Apply when a buyer reports a problem with an order they already placed."],
    },
    "casual-chat": {
        "train": [
            "Use for greetings, compliments, emoji and small talk that need no product facts.",
            "For friendly chatter that needs no data.",
        ],
        "heldout": ["Apply to hellos, praise and banter where no facts are needed."],
    },
    "presentation-order": {
        "train": [
            "Use when a viewer wants to see another product, e.g. the next one.",
            "For requests to show a different item on screen.",
        ],
        "heldout": ["Apply when the audience asks to move on to another article."],
    },
    "faq-replies": {
        "train": [
            "Use for store policy questions: payment, invoices, authenticity, address changes.",
            "For general store policy questions answered by the FAQ.",
        ],
        "heldout": ["Apply to questions about how the shop works (payment, invoices, guarantees)."],
    },
}

# The wide train pool (an envelope's `pools: wide`): many more paraphrases, each an opener and one
# phrasing of what the skill covers. Why (reports/stage1b.md, attempt 10): with two train descriptions
# per skill, the student's skill scan wrote the words for held-out descriptions by position, not by
# reading them. The openers and topics are written without the held-out wording (a test keeps the
# pools disjoint); the held-out split is the same in both pools.
SKILL_DESCRIPTION_OPENERS: tuple[str, ...] = (
    "Use for {x}.",
    "For {x}.",
    "Load this for {x}.",
    "Pick this skill for {x}.",
    "Handles {x}.",
    "Covers {x}.",
    "Choose it for {x}.",
    "Good for {x}.",
    "Meant for {x}.",
    "Needed for {x}.",
)
SKILL_DESCRIPTION_TOPICS: dict[str, tuple[str, ...]] = {
    "product-qa": (
        "questions on a product's stock, colors, sizes, material, features or shipping",
        "what is in stock, which sizes and colors exist, what it is made of and how it ships",
        "facts about an item: inventory, size, color, specs and delivery time",
        "stock levels, size charts, materials and shipping of the products shown",
        "questions like 'is it in stock?', 'which sizes?' or 'how long does shipping take?'",
        "details of a product: availability, measurements, materials, delivery",
    ),
    "pricing-discounts": (
        "questions on prices, deals, promo prices or coupon codes",
        "what an item costs and which coupon codes or deals apply",
        "price questions, live promo prices and coupon thresholds",
        "questions like 'how much is it?' or 'is there a coupon?'",
        "the cost of a product and any discount that applies to it",
        "prices, promotions and money-off codes",
    ),
    "after-sales-handoff": (
        "order problems: refunds, returns, damaged, wrong or late items, complaints",
        "viewers whose order arrived broken, wrong, late or not at all",
        "refund and return requests and other trouble with an order",
        "issues after a purchase that need a customer-service ticket",
        "questions like 'my parcel never came' or 'I want my money back'",
        "complaints about an order that customer service must take over",
    ),
    "casual-chat": (
        "greetings, compliments, emoji and small talk that need no product facts",
        "hi, thanks, emoji and chit-chat with no question about facts",
        "welcoming viewers and answering compliments",
        "small talk, jokes and greetings in the chat",
        "messages like 'hello!' or 'love this stream' that ask for no data",
        "friendly chatter where no product data is needed",
    ),
    "presentation-order": (
        "requests to show a different item on screen",
        "viewers who want to see the next product or another one",
        "switching which product is shown in the stream",
        "requests like 'show the next one' or 'switch to the jacket'",
        "changing the product on display when a viewer asks for another",
        "putting another product from the lineup on screen",
    ),
    "faq-replies": (
        "store policy questions: payment, invoices, authenticity, address changes",
        "how payment, invoices and address changes work in this store",
        "questions about store rules: payment methods, invoices, authenticity",
        "policy questions like 'can I pay later?' or 'do I get an invoice?'",
        "general questions about buying from this store, answered by the FAQ",
        "the store's FAQ topics: paying, receipts, genuine goods, changing an address",
    ),
}
SKILL_DESCRIPTIONS_WIDE: dict[str, Pool] = {
    fid: {
        "train": [
            *pool["train"],
            *(o.format(x=t) for o in SKILL_DESCRIPTION_OPENERS for t in SKILL_DESCRIPTION_TOPICS[fid]),
        ],
        "heldout": pool["heldout"],
    }
    for fid, pool in SKILL_DESCRIPTIONS.items()
}

# -- rules: paraphrase material ------------------------------------------------------------------------
RULE_PREFIXES: Pool = {
    "train": ["", "Rule: ", "Important: ", "Always remember: "],
    "heldout": ["Note - ", "Policy: ", "Must: "],
}
RULE_SYNONYMS: Pool = {
    "train": [
        ("Never ", "Do not ever "),
        ("never ", "do not "),
        ("call ", "use the tool "),
        ("Say ", "State "),
        ("short", "brief"),
    ],
    "heldout": [
        ("Never ", "Under no circumstances "),
        ("never ", "at no point "),
        ("call ", "invoke "),
        ("Say ", "Tell the viewer "),
        ("short", "concise"),
    ],
}

# -- output protocol and hooks ---------------------------------------------------------------------
REPLY_FIELDS: Pool = {"train": ["reply", "answer", "text", "say"], "heldout": ["response", "message", "utterance"]}
SKILL_TOOL_NAMES: Pool = {
    "train": ["load_skill", "use_skill", "open_skill"],
    "heldout": ["activate_skill", "read_skill"],
}
FEEDBACK_TEMPLATES: Pool = {
    "train": [
        "[{hook}] {reason}",
        "Hook {hook} rejected the reply: {reason}",
        "Problem ({hook}): {reason}. Try again.",
    ],
    "heldout": ['<feedback source="{hook}">{reason}</feedback>', "NOTE - {reason} (check: {hook})"],
}

# -- decoys: plausible but irrelevant to a live-commerce host ---------------------------------------------
DECOY_TOOLS: Pool = {
    "train": [
        ("get_weather", "Weather forecast for a city.", {"city": {"type": "string"}}),
        (
            "translate_text",
            "Translate a text into another language.",
            {"text": {"type": "string"}, "target": {"type": "string"}},
        ),
        (
            "get_exchange_rate",
            "Exchange rate between two currencies.",
            {"base": {"type": "string"}, "quote": {"type": "string"}},
        ),
        ("book_meeting", "Book a meeting in the staff calendar.", {"when": {"type": "string"}}),
        ("get_sales_report", "Internal daily sales report for managers.", {"day": {"type": "string"}}),
    ],
    "heldout": [
        ("check_loyalty_points", "Points balance of a loyalty-club member.", {"member_id": {"type": "string"}}),
        ("play_music", "Play background music in the studio.", {"track": {"type": "string"}}),
        ("get_stock_market", "Share price of a listed company.", {"ticker": {"type": "string"}}),
        ("schedule_stream", "Schedule a future live stream.", {"start": {"type": "string"}}),
    ],
}
DECOY_SKILLS: Pool = {
    "train": [
        (
            "weather-small-talk",
            "Use when viewers talk about the weather or the season's forecast.",
            "1. Mention the weather only in passing.\n2. Do not forecast.",
        ),
        (
            "recipe-ideas",
            "Use when a viewer asks for a recipe or cooking tips.",
            "1. Suggest a simple recipe.\n2. Keep it to one sentence.",
        ),
        (
            "investment-tips",
            "Use for questions about stocks, crypto or savings.",
            "1. Give general savings tips.\n2. Never recommend a stock.",
        ),
    ],
    "heldout": [
        (
            "travel-guide",
            "Use when a viewer asks about holiday destinations.",
            "1. Name one destination.\n2. Keep it short.",
        ),
        (
            "fitness-coach",
            "Use for workout and training questions.",
            "1. Suggest a light exercise.\n2. No medical advice.",
        ),
    ],
}
# The wide train pool adds eight more off-topic skills (held-out decoys unchanged).
DECOY_SKILLS_WIDE: Pool = {
    "train": [
        *DECOY_SKILLS["train"],
        ("pet-care", "Use for questions about feeding or walking pets.", "1. Give one general tip.\n2. No vet advice."),
        ("movie-picks", "For viewers who want a film or series to watch.", "1. Name one title.\n2. No spoilers."),
        (
            "garden-help",
            "Use when someone asks about plants or gardening.",
            "1. Give one simple tip.\n2. Keep it light.",
        ),
        (
            "music-requests",
            "For song requests and questions about the background music.",
            "1. Name the song if known.\n2. Take no requests.",
        ),
        (
            "homework-help",
            "Use for school homework and exam questions.",
            "1. Give a hint, not the answer.\n2. Keep it short.",
        ),
        ("star-signs", "For horoscope and zodiac questions.", "1. Keep it playful.\n2. Make no predictions."),
        (
            "car-repair",
            "Use for questions about fixing cars or bikes.",
            "1. Suggest seeing a mechanic.\n2. No repair steps.",
        ),
        (
            "tax-questions",
            "For questions about taxes and tax returns.",
            "1. Suggest an adviser.\n2. Give no tax advice.",
        ),
    ],
    "heldout": DECOY_SKILLS["heldout"],
}
