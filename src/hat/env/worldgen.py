"""Seeded world generator for the simulated live room: products, FAQ, coupons and rooms.

``generate_world(seed)`` draws every choice from one ``random.Random(seed)`` (no global RNG, no
clock, no ``hash()`` of strings), so the same seed gives byte-identical canonical JSON on every
machine, and :func:`hat.env.world.world_catalog` can cache catalogs by seed.

Design choices:

- **Blueprints, not free text.** Each of the ten categories has four item blueprints (names,
  aliases, spec options, price range); a world samples three per category (30 products) and then
  samples brand, colors, sizes, prices, stock and spec values. Worlds differ in which items exist
  and in every number, but names stay plausible and grammatical for the viewer templates.
- **The bundled catalog's record shapes, exactly.** :meth:`World.to_catalog_dict` has the keys of
  ``data/catalog.json`` (rooms add ``host_script``, which :class:`Catalog` ignores), so the existing
  tools run unchanged on ``Catalog.from_dict(world.to_catalog_dict())``.
- **Prices are never whole numbers** (``45.9``, ``32.99``): the tools quote them verbatim, and a
  value that prints the same in JSON and in a reply keeps gold facts like ``"45.9"`` checkable.
- **Names avoid color words** ("Earl Grey" would steal "the grey one"), and an alias is kept only
  if it resolves to its own product through :meth:`Catalog.find_product`, so every alias a viewer
  uses is one the tools understand.
- **Static FAQ facts.** Every world has all 18 FAQ entries (answers vary by seed: days, fees,
  payment methods); :data:`FAQ_FACTS` holds, per FAQ id, a phrase every generated answer contains
  verbatim, which the viewer generator uses as the gold fact for FAQ questions.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from dataclasses import dataclass
from typing import Any, NamedTuple

from hat.env.catalog import Catalog
from hat.harness.state import canonical_json, sha256_text

__all__ = ["FAQ_FACTS", "World", "generate_world"]

_Rec = dict[str, Any]  # a JSON record: product, FAQ entry, coupon, room

PER_CATEGORY = 3
N_ROOMS = 4


class _Item(NamedTuple):
    kind: str  # goes into the id: p-<kind>-NN
    names: tuple[str, ...]
    aliases: tuple[str, ...]
    price: tuple[int, int]
    specs: dict[str, tuple[str, ...]]
    sizes: tuple[tuple[str, ...], ...] = ()  # overrides the category's size sets
    colors: tuple[str, ...] | None = None  # overrides the category's color pool; () = no colors


class _Category(NamedTuple):
    brands: tuple[str, ...]
    colors: tuple[str, ...]  # empty: the items have no color option
    sizes: tuple[tuple[str, ...], ...]  # empty: no size option
    returns: tuple[str, ...]
    ship_days: tuple[int, int]
    items: tuple[_Item, ...]


_APPAREL_CARE = ("machine wash cold, tumble dry low", "machine wash 30 C, do not bleach", "hand wash only, dry flat")
_WARRANTY = ("1 year", "2 years", "6 months")
_STD_RETURNS = ("30-day free returns, unused with tags", "14-day returns, unused in original packaging")

# fmt: off
_CATEGORIES: dict[str, _Category] = {
    "apparel": _Category(
        ("NorthNest", "Lumina", "Threadline", "Velory"),
        ("black", "white", "grey", "navy", "green", "beige", "pink", "burgundy"),
        (("S", "M", "L"), ("XS", "S", "M", "L"), ("M", "L", "XL")),
        ("30-day free returns, unworn with tags", "14-day returns, unworn with tags"), (1, 3),
        (
            _Item("hoodie", ("Cloud Fleece Hoodie", "Cozy Zip Hoodie"), ("hoodie", "sweatshirt", "hoody"), (35, 59),
                  {"material": ("80% cotton, 20% polyester", "100% organic cotton", "brushed fleece, 70% cotton"),
                   "fit": ("relaxed, size down for a closer fit", "true to size", "oversized fit"),
                   "weight": ("420 g/m2", "380 g/m2"), "care": _APPAREL_CARE}),
            _Item("dress", ("Floral Midi Wrap Dress", "Linen Summer Dress"), ("dress", "sundress", "wrap dress"),
                  (39, 69), {"material": ("100% viscose", "100% linen", "cotton poplin"),
                             "fit": ("true to size, tie waist", "loose fit", "fitted at the waist"),
                             "length": ("midi, 110 cm", "knee length, 95 cm"), "care": _APPAREL_CARE}),
            _Item("jeans", ("Straight Leg Denim Jeans", "High Rise Skinny Jeans"), ("jeans", "denim"), (45, 79),
                  {"material": ("98% cotton, 2% elastane", "100% cotton denim"),
                   "fit": ("runs small, size up", "true to size", "stretchy, true to size"),
                   "inseam": ("76 cm", "81 cm"), "care": _APPAREL_CARE}, sizes=(("26", "28", "30", "32"),)),
            _Item("jacket", ("Packable Puffer Jacket", "Storm Shell Rain Jacket"), ("jacket", "puffer", "coat"),
                  (69, 129), {"material": ("recycled nylon shell", "100% polyester, taped seams"),
                              "water_resistance": ("water-repellent", "waterproof, 10000 mm"),
                              "fit": ("true to size", "roomy, fits a sweater underneath"),
                              "weight": ("350 g", "480 g")}),
        ),
    ),
    "footwear": _Category(
        ("Stride", "Pacera", "Loomfoot", "Trailo"), ("white", "black", "navy", "grey", "tan", "olive"),
        (("38", "40", "42", "44"), ("37", "39", "41", "43")),
        ("30-day free returns, unworn in original box",), (2, 4),
        (
            _Item("sneaker", ("StrideLite Running Sneakers", "AirMesh Trainers"),
                  ("sneakers", "running shoes", "trainers", "runners"), (55, 99),
                  {"upper": ("breathable knit mesh", "engineered mesh"), "sole": ("EVA foam, rubber outsole",),
                   "fit": ("runs half a size small", "true to size", "wide toe box"),
                   "weight": ("240 g per shoe", "280 g per shoe")}),
            _Item("boots", ("Chelsea Leather Boots", "Trail Hiking Boots"), ("boots", "chelsea boots", "hikers"),
                  (79, 149), {"upper": ("full-grain leather", "suede with waterproof membrane"),
                              "sole": ("lug rubber sole", "stacked rubber heel"),
                              "fit": ("true to size", "runs large, size down"),
                              "water_resistance": ("water-resistant", "waterproof membrane")}),
            _Item("sandals", ("Cloudstep Slide Sandals", "Strappy Summer Sandals"), ("sandals", "slides"),
                  (25, 45), {"material": ("EVA foam", "vegan leather straps"),
                             "fit": ("true to size", "runs small, size up"), "weight": ("150 g per shoe",)}),
            _Item("loafers", ("Classic Suede Loafers", "Penny Loafers"), ("loafers", "slip ons"), (59, 95),
                  {"upper": ("suede", "polished leather"), "sole": ("rubber sole",),
                   "fit": ("true to size", "narrow fit")}),
        ),
    ),
    "beauty": _Category(
        ("Rouge Atelier", "Glossia", "Petalune", "Kiramo"), ("rose", "coral", "ruby", "nude", "berry", "mauve"), (),
        ("unopened items only, within 14 days",), (1, 3),
        (
            _Item("lipstick", ("Velvet Matte Lipstick", "Satin Shine Lipstick"), ("lipstick", "lippie"), (14, 29),
                  {"finish": ("matte", "satin", "cream"), "wear_time": ("up to 8 hours", "up to 12 hours"),
                   "net_weight": ("3.5 g", "4 g"), "ingredients_note": ("vegan, fragrance-free", "cruelty-free")}),
            _Item("mascara", ("Volume Lash Mascara", "Lengthening Mascara"), ("mascara", "lash"), (12, 26),
                  {"wear_time": ("up to 12 hours", "up to 24 hours"), "water_resistance": ("waterproof", "smudgeproof"),
                   "net_weight": ("9 ml", "11 ml")}, colors=("black", "brown")),
            _Item("palette", ("Sunset Eyeshadow Palette", "Everyday Eyeshadow Palette"), ("palette", "eyeshadow"),
                  (24, 45), {"finish": ("matte and shimmer", "all matte"), "pans": ("9 shades", "12 shades"),
                             "ingredients_note": ("talc-free", "vegan")}, colors=()),
            _Item("blush", ("Cheek Tint Blush", "Powder Blush Duo"), ("blush", "cheek tint"), (15, 29),
                  {"finish": ("dewy", "matte", "satin"), "wear_time": ("up to 10 hours",),
                   "net_weight": ("5 g", "6 g")}),
        ),
    ),
    "skincare": _Category(
        ("Dermaleaf", "Purela", "Aquamis", "Botanica"), (), (("30 ml", "50 ml"),),
        ("unopened items only, within 14 days",), (1, 3),
        (
            _Item("serum", ("Hydra Vitamin C Serum", "Retinol Night Serum"), ("serum", "face serum"), (25, 49),
                  {"key_ingredients": ("10% vitamin C, hyaluronic acid", "0.3% retinol, squalane"),
                   "skin_types": ("all skin types, patch test first", "normal to oily skin"),
                   "usage": ("2-3 drops in the morning", "a few drops at night"),
                   "shelf_life": ("12 months after opening", "6 months after opening")}),
            _Item("moisturizer", ("Daily Barrier Moisturizer", "Oil-Free Gel Cream"),
                  ("moisturizer", "moisturiser", "face cream"), (19, 39),
                  {"key_ingredients": ("ceramides, niacinamide", "aloe, hyaluronic acid"),
                   "skin_types": ("dry and sensitive skin", "oily and combination skin"),
                   "usage": ("morning and night", "after serum, twice a day"),
                   "shelf_life": ("12 months after opening",)}, sizes=(("50 ml", "100 ml"),)),
            _Item("sunscreen", ("Invisible Shield Sunscreen SPF 50", "Mineral Sunscreen SPF 30"),
                  ("sunscreen", "spf", "sunblock"), (15, 32),
                  {"key_ingredients": ("chemical filters, no white cast", "zinc oxide"),
                   "skin_types": ("all skin types", "sensitive skin"),
                   "usage": ("reapply every 2 hours",), "water_resistance": ("40 minutes", "80 minutes")},
                  sizes=(("50 ml",), ("50 ml", "100 ml"))),
            _Item("cleanser", ("Gentle Foam Cleanser", "Micellar Cleansing Water"), ("cleanser", "face wash"),
                  (12, 25), {"key_ingredients": ("amino acids, glycerin", "micellar water, cucumber"),
                             "skin_types": ("all skin types", "dry skin"), "usage": ("morning and night",)},
                  sizes=(("150 ml", "300 ml"),)),
        ),
    ),
    "electronics": _Category(
        ("Sonexa", "Voltic", "Lumio", "Pixora"), ("white", "black", "silver", "blue"), (),
        ("15-day returns in original packaging; warranty claims via customer service",), (1, 2),
        (
            _Item("earbuds", ("AirBeat Pro Wireless Earbuds", "SoundPods Mini Earbuds"),
                  ("earbuds", "earphones", "buds"), (49, 99),
                  {"battery": ("8 h per charge, 32 h with case", "6 h per charge, 24 h with case"),
                   "bluetooth": ("5.3", "5.2"), "noise_cancelling": ("active (ANC)", "passive only"),
                   "water_resistance": ("IPX4 (sweat and splashes)", "IPX5"), "warranty": _WARRANTY}),
            _Item("powerbank", ("PowerCube 10000 mAh Power Bank", "SlimCharge 20000 mAh Power Bank"),
                  ("power bank", "powerbank", "portable charger"), (25, 49),
                  {"capacity": ("10000 mAh", "20000 mAh"), "ports": ("USB-C and USB-A", "2 x USB-C"),
                   "weight": ("210 g", "360 g"), "warranty": _WARRANTY}),
            _Item("speaker", ("BoomBox Mini Bluetooth Speaker", "WaveSound Portable Speaker"),
                  ("speaker", "bluetooth speaker"), (35, 89),
                  {"battery": ("12 h per charge", "20 h per charge"), "water_resistance": ("IPX7 (waterproof)", "IPX4"),
                   "bluetooth": ("5.3", "5.0"), "warranty": _WARRANTY}),
            _Item("smartwatch", ("FitPulse Smartwatch", "Chrono Active Smartwatch"),
                  ("smartwatch", "watch", "fitness tracker"), (89, 199),
                  {"battery": ("7 days per charge", "14 days per charge"),
                   "display": ("1.4 inch AMOLED", "1.7 inch LCD"),
                   "water_resistance": ("5 ATM", "IP68"), "warranty": _WARRANTY}),
        ),
    ),
    "kitchen": _Category(
        ("CrispChef", "Kitchora", "Brewell", "Panhaus"), ("black", "white", "red", "silver"), (),
        ("30-day returns; damaged on arrival goes to customer service",), (2, 5),
        (
            _Item("fryer", ("TurboCrisp 5L Air Fryer", "Compact 3.5L Air Fryer"), ("air fryer", "airfryer", "fryer"),
                  (69, 139), {"capacity": ("5 L", "3.5 L"), "power": ("1500 W, 120 V", "1200 W, 120 V"),
                              "temperature_range": ("80-200 C", "80-230 C"), "warranty": _WARRANTY}),
            _Item("kettle", ("Rapid Boil Electric Kettle", "Glass Electric Kettle"), ("kettle", "electric kettle"),
                  (25, 59), {"capacity": ("1.7 L", "1.5 L"), "power": ("1500 W", "1800 W"),
                             "material": ("stainless steel", "borosilicate glass"), "warranty": _WARRANTY}),
            _Item("blender", ("PowerBlend Smoothie Blender", "Personal Mini Blender"), ("blender", "smoothie maker"),
                  (35, 99), {"capacity": ("1.5 L jar", "600 ml cup"), "power": ("1000 W", "350 W"),
                             "dishwasher_safe": ("yes, jar and blades", "cup only"), "warranty": _WARRANTY}),
            _Item("pan", ("Nonstick Frying Pan 28 cm", "Cast Iron Skillet 26 cm"), ("frying pan", "skillet", "pan"),
                  (25, 59), {"material": ("forged aluminium, ceramic coating", "pre-seasoned cast iron"),
                             "dishwasher_safe": ("yes", "no, hand wash only"), "weight": ("1.1 kg", "2.6 kg")},
                  colors=()),
        ),
    ),
    "food": _Category(
        ("Beanhouse", "Harvestly", "Nutrio", "Sweetfield"), (), (("250 g", "500 g"), ("1 kg",)),
        ("food items cannot be returned once opened",), (1, 3),
        (
            _Item("coffee", ("Highland Roast Coffee Beans", "Espresso Dark Roast Beans"), ("coffee", "coffee beans"),
                  (14, 32), {"origin": ("Colombia and Ethiopia blend", "100% Brazil"), "roast": ("medium", "dark"),
                             "tasting_notes": ("chocolate, caramel, citrus", "cocoa, hazelnut"),
                             "best_before": ("9 months from roast date", "12 months from roast date")}),
            _Item("tea", ("Jasmine Leaf Tea", "Chamomile Herbal Tea"), ("tea", "loose tea"), (9, 22),
                  {"origin": ("Fujian, China", "Egypt"), "caffeine": ("low caffeine", "caffeine-free"),
                   "best_before": ("18 months", "24 months")}),
            _Item("granola", ("Almond Crunch Granola", "Maple Pecan Granola"), ("granola", "cereal"), (7, 15),
                  {"allergens": ("contains nuts and oats", "contains tree nuts"),
                   "best_before": ("6 months", "9 months"), "sugar": ("6 g per serving", "4 g per serving")}),
            _Item("chocolate", ("Sea Salt Dark Chocolate", "Hazelnut Milk Chocolate"), ("chocolate", "choc"),
                  (5, 14), {"cocoa": ("70% cocoa", "35% cocoa"),
                            "allergens": ("may contain milk", "contains hazelnuts"),
                            "origin": ("Ecuador cocoa", "Ghana cocoa")}, sizes=(("100 g", "250 g"),)),
        ),
    ),
    "sports": _Category(
        ("Zenmove", "Peakform", "Aquafit", "Ridgeline"), ("purple", "teal", "black", "blue", "orange"), (),
        ("30-day free returns, unused",), (2, 4),
        (
            _Item("yogamat", ("FlexGrip Yoga Mat", "Cork Yoga Mat"), ("yoga mat", "exercise mat", "mat"), (29, 59),
                  {"material": ("TPE, latex-free", "natural cork and rubber"),
                   "dimensions": ("183 x 61 cm", "185 x 68 cm"), "weight": ("0.9 kg", "2.2 kg")},
                  sizes=(("4 mm", "6 mm"), ("6 mm",))),
            _Item("dumbbells", ("Adjustable Dumbbell Set", "Neoprene Dumbbells Pair"), ("dumbbells", "weights"),
                  (39, 129), {"material": ("cast iron, chrome handles", "neoprene coated iron"),
                              "grip": ("knurled handle", "non-slip coating")}, sizes=(("2 x 5 kg", "2 x 10 kg"),)),
            _Item("bottle", ("Insulated Sports Bottle", "Collapsible Water Bottle"), ("water bottle", "bottle"),
                  (15, 35), {"material": ("stainless steel, BPA-free", "food-grade silicone"),
                             "insulation": ("cold 24 h, hot 12 h", "not insulated"),
                             "dishwasher_safe": ("yes", "lid only")}, sizes=(("500 ml", "750 ml"),)),
            _Item("bands", ("Resistance Bands Set", "Loop Resistance Bands"), ("resistance bands", "bands"), (15, 29),
                  {"material": ("natural latex", "fabric, latex-free"), "levels": ("5 levels", "3 levels")}),
        ),
    ),
    "toys": _Category(
        ("Tinytree", "Playnest", "Brickly", "Wondo"), (), (),
        ("30-day returns, unused in original box",), (2, 4),
        (
            _Item("blocks", ("Wooden Stacking Blocks", "Classic Building Blocks"), ("blocks", "building blocks"),
                  (19, 39), {"material": ("beech wood, water-based paint", "ABS plastic"),
                             "age": ("2 years and up", "3 years and up"), "pieces": ("24 pieces", "50 pieces"),
                             "safety": ("meets ASTM F963", "CE certified")}),
            _Item("puzzle", ("1000 Piece Jigsaw Puzzle", "Animal Floor Puzzle"), ("puzzle", "jigsaw"), (12, 29),
                  {"age": ("8 years and up", "3 years and up"), "dimensions": ("70 x 50 cm", "90 x 60 cm"),
                   "material": ("recycled cardboard",)}),
            _Item("plush", ("Cuddly Bear Plush", "Sleepy Bunny Plush"), ("plush", "teddy", "stuffed animal"), (15, 35),
                  {"age": ("0 months and up", "3 years and up"), "material": ("polyester plush",),
                   "care": ("machine washable", "surface wash only"), "safety": ("CE certified",)},
                  colors=("brown", "white", "pink")),
            _Item("rccar", ("Turbo RC Race Car", "Off-Road RC Truck"), ("rc car", "remote control car"), (35, 79),
                  {"age": ("8 years and up", "6 years and up"), "battery": ("20 min per charge", "30 min per charge"),
                   "speed": ("up to 20 km/h", "up to 15 km/h")}, colors=("red", "blue", "yellow")),
        ),
    ),
    "home": _Category(
        ("Cozyloft", "Lumora", "Nestwell", "Hyggen"), ("beige", "grey", "white", "sage", "charcoal"), (),
        _STD_RETURNS, (2, 5),
        (
            _Item("blanket", ("Chunky Knit Throw Blanket", "Sherpa Throw Blanket"), ("blanket", "throw"), (35, 79),
                  {"material": ("acrylic chunky knit", "polyester sherpa"),
                   "dimensions": ("130 x 170 cm", "150 x 200 cm"),
                   "care": ("machine wash cold", "hand wash only")}),
            _Item("candle", ("Vanilla Soy Candle", "Cedarwood Scented Candle"), ("candle", "scented candle"), (12, 29),
                  {"burn_time": ("40 hours", "55 hours"), "material": ("soy wax, cotton wick", "coconut wax blend"),
                   "scent": ("vanilla and amber", "cedarwood and sage")}, colors=(), sizes=(("200 g", "400 g"),)),
            _Item("lamp", ("Arc Floor Lamp", "Mushroom Table Lamp"), ("lamp", "floor lamp", "table lamp"), (39, 119),
                  {"dimensions": ("165 cm tall", "30 cm tall"), "bulb": ("E26, LED included", "E12, not included"),
                   "power": ("9 W LED",), "warranty": _WARRANTY}),
            _Item("pillow", ("Memory Foam Pillow", "Cooling Gel Pillow"), ("pillow",), (29, 59),
                  {"material": ("memory foam, bamboo cover", "gel-infused foam"), "dimensions": ("60 x 40 cm",),
                   "care": ("cover machine washable",)}, colors=()),
        ),
    ),
}

# fmt: on

_REGIONS = ("US", "CA", "UK", "EU", "AU")
_HOSTS = ("Mia", "Leo", "Ava", "Kai", "Zoe", "Sam", "Nora", "Ravi", "Lina", "Theo")
_EXPIRIES = ("2025-11-30", "2025-12-15", "2025-12-31", "2026-01-15", "2026-01-31", "2026-02-28")

# FAQ: (id, question, answer (with {slots}), tags). FAQ_FACTS[id] appears verbatim in every answer.
# fmt: off
_FAQ_POOL: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("faq-ship-time", "How long does delivery take?",
     "Orders leave the warehouse in 1-{days} days depending on the item; the product's shipping info has the "
     "exact dispatch time.", ("shipping", "delivery", "arrive", "when", "dispatch")),
    ("faq-returns", "What is the return policy?",
     "Most items have {ret}-day free returns if unused; beauty and skincare only unopened within 14 days; opened "
     "food cannot be returned.", ("return", "refund", "policy", "send back")),
    ("faq-coupon-use", "How do I use a coupon code?",
     "Enter the code at checkout in the 'Promo code' box; one coupon per order.",
     ("coupon", "code", "voucher", "checkout", "apply", "enter")),
    ("faq-payment", "Which payment methods do you accept?",
     "Credit and debit cards, PayPal, {extra_pay} and Google Pay.", ("payment", "pay", "card", "paypal", "apple")),
    ("faq-size-guide", "Where can I find the size guide?",
     "Tap the product link and open 'Size guide' under the photos.",
     ("size", "sizing", "guide", "chart", "measurements")),
    ("faq-authentic", "Are the products authentic?",
     "Yes, every item ships from the brand or an authorised distributor.",
     ("authentic", "original", "genuine", "fake", "real")),
    ("faq-change-address", "Can I change my address or cancel my order?",
     "Within {hours} hour of ordering you can edit or cancel in 'My orders'; after that, contact customer service.",
     ("address", "cancel", "edit", "wrong", "typed")),
    ("faq-restock", "When will sold-out items be restocked?",
     "Restock dates are not fixed; tap 'Notify me' on the product page to get an alert.",
     ("restock", "sold", "back", "again")),
    ("faq-international", "Do you ship internationally?",
     "Shipping regions differ per product; check the product's shipping info for the list of regions.",
     ("international", "overseas", "country", "countries", "abroad")),
    ("faq-live-price", "Is the live price available after the stream?",
     "Live promo prices are valid only while the product link is active in this stream.",
     ("live", "price", "after", "stream", "end")),
    ("faq-invoice", "Can I get an invoice?", "Yes, download it from 'My orders' once the order has shipped.",
     ("invoice", "receipt", "bill")),
    ("faq-gift-wrap", "Do you offer gift wrapping?", "Yes, add gift wrap at checkout for {wrap} USD.",
     ("gift", "wrap", "wrapping", "present")),
    ("faq-tracking", "How do I track my order?",
     "Open 'My orders' and tap 'Track'; the tracking number is emailed once the parcel ships.",
     ("track", "tracking", "parcel", "package")),
    ("faq-warranty", "How do warranty claims work?",
     "Warranty claims go through customer service with your order number; keep the receipt.",
     ("warranty", "claim", "breaks", "broken")),
    ("faq-bundle", "Do items ordered together ship together?",
     "Items ordered together ship in one box when they leave the same warehouse.",
     ("together", "combine", "one", "box", "multiple")),
    ("faq-gift-card", "Do you sell gift cards?", "Yes, digital gift cards from 10 to {card_max} USD, sent by email.",
     ("gift card", "card", "voucher", "buy")),
    ("faq-points", "How do loyalty points work?",
     "You earn 1 point per dollar; 100 points take 1 USD off a later order.", ("points", "loyalty", "earn", "reward")),
    ("faq-next-live", "When is the next live stream?",
     "Follow the room and turn on live alerts; the schedule is posted on the shop page.",
     ("next", "live", "stream", "schedule", "notified", "alert")),
)

FAQ_FACTS: dict[str, str] = {
    "faq-ship-time": "dispatch time", "faq-returns": "free returns", "faq-coupon-use": "Promo code",
    "faq-payment": "PayPal", "faq-size-guide": "Size guide", "faq-authentic": "authorised distributor",
    "faq-change-address": "My orders", "faq-restock": "Notify me", "faq-international": "differ per product",
    "faq-live-price": "only while the product link is active", "faq-invoice": "My orders",
    "faq-gift-wrap": "gift wrap", "faq-tracking": "tracking number", "faq-warranty": "customer service",
    "faq-bundle": "same warehouse", "faq-gift-card": "gift cards", "faq-points": "1 point per dollar",
    "faq-next-live": "live alerts",
}
# fmt: on

_DISCOUNT_RULES = (
    "Only one coupon per order; coupons cannot be combined.",
    "Coupon thresholds are checked against the promo price, before shipping.",
    "Promo prices are valid only while the product link is live in this stream.",
)


@dataclass(frozen=True)
class World:
    """A generated world. Records are plain dicts in the bundled catalog's shapes; treat them as
    read-only (rooms are copied by whoever mutates them)."""

    seed: int
    currency: str
    products: tuple[_Rec, ...]
    faq: tuple[_Rec, ...]
    campaigns: tuple[_Rec, ...]
    discount_rules: tuple[str, ...]
    rooms: tuple[_Rec, ...]

    def _records(self) -> _Rec:
        fields = ("products", "faq", "campaigns", "discount_rules")
        return {"currency": self.currency, **{f: list(getattr(self, f)) for f in fields}}

    def to_dict(self) -> _Rec:
        return {"seed": self.seed, **self._records(), "rooms": list(self.rooms)}

    def to_catalog_dict(self, room_id: str | None = None) -> _Rec:
        """The world in ``data/catalog.json``'s shape, with one room (default: the first)."""
        return {**self._records(), "room": self.room(room_id)}

    def catalog(self, room_id: str | None = None) -> Catalog:
        return Catalog.from_dict(self.to_catalog_dict(room_id))

    def room(self, room_id: str | None = None) -> _Rec:
        if room_id is None:
            return self.rooms[0]
        found = next((r for r in self.rooms if r["room_id"] == room_id), None)
        if found is None:
            known = ", ".join(r["room_id"] for r in self.rooms)
            raise KeyError(f"no room {room_id!r} in world {self.seed}; known rooms: {known}")
        return found

    def product(self, product_id: str) -> _Rec | None:
        return next((p for p in self.products if p["id"] == product_id), None)

    def moment(self, rng: random.Random) -> _Rec:
        """A private copy of a random room at a random moment: any product of its order on
        display, fewer turns and less time left."""
        base = rng.choice(self.rooms)
        room = copy.deepcopy(base)
        room["on_display"] = rng.choice(room["order"])
        room["turns_left"] = rng.randint(1, base["turns_left"])
        room["time_left_s"] = 30 * rng.randint(1, base["time_left_s"] // 30)
        return room

    def content_hash(self) -> str:
        return sha256_text(canonical_json(self.to_dict()))


def generate_world(seed: int) -> World:
    """Build the world for ``seed`` (deterministic: one ``random.Random(seed)`` drives everything)."""
    rng = random.Random(seed)
    products = _products(rng)
    campaigns = _campaigns(rng)
    world = World(
        seed=seed,
        currency="USD",
        products=tuple(products),
        faq=tuple(_faq(rng)),
        campaigns=tuple(campaigns),
        discount_rules=_DISCOUNT_RULES,
        rooms=(),
    )
    rooms = tuple(_room(rng, k, products, campaigns) for k in range(N_ROOMS))
    return _prune_aliases(dataclasses.replace(world, rooms=rooms))


# -- products ---------------------------------------------------------------------------------------
def _products(rng: random.Random) -> list[_Rec]:
    products: list[_Rec] = []
    for category, spec in _CATEGORIES.items():
        for item in rng.sample(spec.items, PER_CATEGORY):
            pid = f"p-{item.kind}-{rng.randint(1, 9):02d}"  # kinds are unique across the tables
            products.append(_product(rng, pid, category, spec, item))
    return products


def _price(rng: random.Random, lo: int, hi: int) -> float:
    return round(rng.randint(lo, hi) + rng.choice((0.9, 0.99, 0.5)), 2)


def _promo(rng: random.Random, price: float) -> float | None:
    if rng.random() < 0.4:
        return None
    promo = round(int(price * rng.choice((0.7, 0.75, 0.8, 0.85, 0.9))) + rng.choice((0.9, 0.5)), 2)
    return promo if promo < price else None


def _options(rng: random.Random, spec: _Category, item: _Item) -> tuple[list[str], list[str]]:
    pool = spec.colors if item.colors is None else item.colors
    colors = rng.sample(pool, min(len(pool), rng.randint(2, 3))) if pool else []
    size_sets = item.sizes or spec.sizes
    sizes = list(rng.choice(size_sets)) if size_sets else []
    return colors, sizes


def _stock(rng: random.Random, colors: list[str], sizes: list[str]) -> list[_Rec]:
    color_opts: list[str | None] = [*colors] or [None]  # None: the product has no such option
    size_opts: list[str | None] = [*sizes] or [None]
    variants = [{"color": c, "size": s} for c in color_opts for s in size_opts]
    stock = [{**v, "qty": 0 if rng.random() < 0.22 else rng.randint(1, 40)} for v in variants]
    if all(v["qty"] == 0 for v in stock):
        stock[0]["qty"] = rng.randint(1, 9)
    return stock


def _shipping(rng: random.Random, spec: _Category, price: float) -> _Rec:
    days = rng.randint(*spec.ship_days)
    fee: float
    if price > 80 and rng.random() < 0.5:
        fee, free_over = 0, 0
    else:
        fee, free_over = rng.choice((3.99, 4.99, 5.99)), rng.choice((35, 49, 59))
    regions = ["US", *sorted(rng.sample(_REGIONS[1:], rng.randint(0, 4)), key=_REGIONS.index)]
    return {"ships_in_days": days, "fee": fee, "free_over": free_over, "regions": regions}


def _product(rng: random.Random, pid: str, category: str, spec: _Category, item: _Item) -> _Rec:
    colors, sizes = _options(rng, spec, item)
    price = _price(rng, *item.price)
    specs: _Rec = {}
    if colors:
        specs["colors"] = colors
    if sizes:
        specs["sizes"] = sizes
    specs.update({key: rng.choice(values) for key, values in item.specs.items()})
    return {
        "id": pid,
        "name": rng.choice(item.names),
        "brand": rng.choice(spec.brands),
        "category": category,
        "aliases": list(item.aliases),
        "price": price,
        "promo_price": _promo(rng, price),
        "stock": _stock(rng, colors, sizes),
        "specs": specs,
        "shipping": _shipping(rng, spec, price),
        "return_policy": rng.choice(spec.returns),
    }


def _prune_aliases(world: World) -> World:
    """Keep an alias only if the catalog resolves it to its own product (no ties, no thefts)."""
    catalog = world.catalog()
    products = []
    for product in world.products:
        kept = [a for a in product["aliases"] if (catalog.find_product(a) or {}).get("id") == product["id"]]
        products.append({**product, "aliases": kept})
    return dataclasses.replace(world, products=tuple(products))


# -- FAQ, campaigns, rooms --------------------------------------------------------------------------
def _faq(rng: random.Random) -> list[_Rec]:
    slots = {
        "days": rng.randint(3, 5), "ret": rng.choice((14, 30)), "extra_pay": rng.choice(("Apple Pay", "Klarna")),
        "hours": rng.choice((1, 2)), "wrap": rng.choice((2.5, 2.99, 3.5)), "card_max": rng.choice((200, 300, 500)),
    }  # fmt: skip
    return [{"id": i, "question": q, "answer": a.format(**slots), "tags": list(t)} for i, q, a, t in _FAQ_POOL]


def _campaigns(rng: random.Random) -> list[_Rec]:
    site = rng.choice((5, 10, 15))
    site_min = site * rng.choice((6, 8, 10))
    cats = rng.sample(sorted(_CATEGORIES), 2)
    cat_off = rng.choice((3, 5, 8))
    cat_min = cat_off * rng.choice((5, 6))
    fan = rng.choice((2, 3, 5))
    prefix = {"beauty": "GLOW", "skincare": "GLOW", "apparel": "STYLE", "footwear": "STEP", "electronics": "TECH",
              "kitchen": "CHEF", "food": "TASTY", "sports": "FIT", "toys": "PLAY", "home": "NEST"}  # fmt: skip
    cat_text = f"${cat_off} off {cats[0]} and {cats[1]} orders of ${cat_min} or more"
    return [
        _coupon(rng, f"LIVE{site}", f"${site} off orders of ${site_min} or more, live viewers only", site_min, site),
        _coupon(rng, f"{prefix[cats[0]]}{cat_off}", cat_text, cat_min, cat_off, cats),
        _coupon(rng, f"NEWFAN{fan}", f"${fan} off a first order for new followers, no minimum", 0, fan),
    ]


def _coupon(
    rng: random.Random, code: str, description: str, threshold: int, discount: int, cats: list[str] | None = None
) -> _Rec:
    return {
        "code": code,
        "description": description,
        "threshold": threshold,
        "discount": discount,
        "categories": sorted(cats) if cats else None,
        "expires": rng.choice(_EXPIRIES),
    }


def _room(rng: random.Random, k: int, products: list[_Rec], campaigns: list[_Rec]) -> _Rec:
    """A themed room: 3-4 categories, 6-9 products from them, a host and a short host script."""
    categories = rng.sample(sorted({p["category"] for p in products}), rng.randint(3, 4))
    pool = [p for p in products if p["category"] in categories]
    order = [p["id"] for p in rng.sample(pool, min(len(pool), rng.randint(6, 9)))]
    coupon = rng.choice(campaigns[:2])
    campaign = f"{coupon['code']}: {coupon['description']}"
    host = rng.choice(_HOSTS)
    by_id = {p["id"]: p for p in products}
    return {
        "room_id": f"room-{k + 1:03d}",
        "host": host,
        "host_script": _host_script(rng, host, [by_id[pid] for pid in order], coupon),
        "on_display": order[0],
        "order": order,
        "turns_left": rng.randint(8, 20),
        "time_left_s": 60 * rng.randint(10, 60),
        "campaign": campaign,
    }


def _host_script(rng: random.Random, host: str, shown: list[_Rec], coupon: _Rec) -> list[str]:
    first, second = shown[0]["name"], shown[1]["name"]
    return [
        f"Hi everyone, {host} here, welcome to the room! First up is our {first}.",
        rng.choice((f"I've been using the {first} all week, honestly love it.",
                    f"Look at the details on the {first}, so well made.")),
        f"Don't forget tonight's code {coupon['code']} on orders of ${coupon['threshold']} or more!",
        f"Next I'll show you the {second}, one of my favourites.",
        rng.choice(("Drop your questions in the chat, I'm reading every one!",
                    "Ask me anything about sizes, colours or shipping!")),
        "Only a few minutes left on this link, so grab it while it's live.",
    ]  # fmt: skip
