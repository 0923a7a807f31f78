"""The domain-neutral runtime core (issue 13): no live-room names in ``hat.harness`` code, a request
is turns + a free-form context, the user message and the context provider belong to the harness,
and the small fixes that fell out (hooks + extra_hooks, started_at, context that cannot override
the harness's own template variables, which context numbers ground a reply)."""

from __future__ import annotations

import ast
import itertools
import json
import re
import time
from pathlib import Path

import pytest

import hat.harness
from hat.harness import Agent, Hook, HookContext, Request, Verdict, load_harness
from hat.harness.hooks import GroundedClaimsHook
from hat.harness.loader import check_harness, load_context_provider
from hat.harness.pipeline import HARNESS_VARIABLES, render_prompt, template_context
from hat.harness.protocol import neutralise_markup
from hat.harness.runtime import format_user_message
from hat.models.scripted import ScriptedModel

HELLO = '<reply>{"reply": "Hello there!"}</reply>'
CORE = Path(hat.harness.__file__).parent
# The live room's vocabulary: none of it may name anything in the core's code.
LIVE_ROOM = re.compile(
    r"(?i)\b(viewers?|products?|faqs?|catalogs?|rooms?|livestream|live[- ]room|avatar|on.display|campaign)\b"
)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """Module/class/function docstrings and attribute docstrings (a string right after an assignment)."""
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        first = body[0]
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and (
            isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        ):
            skip.add(id(first.value))
        for a, b in itertools.pairwise(body):
            if (
                isinstance(a, ast.Assign | ast.AnnAssign)
                and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant)
            ):
                skip.add(id(b.value))
    return skip


def _names_in_code(path: Path) -> list[tuple[int, str]]:
    """Every identifier, attribute, parameter and non-docstring string literal of one module.
    Documentation may use the live room as an example; code may not depend on it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstring_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            text = node.name
        elif isinstance(node, ast.arg):
            text = node.arg
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        found.append((getattr(node, "lineno", 0), text))
    return found


def test_no_live_room_names_in_the_core_code() -> None:
    hits = [
        f"{path.name}:{line}: {text[:80]!r}"
        for path in sorted(CORE.glob("*.py"))
        for line, text in _names_in_code(path)
        if LIVE_ROOM.search(text.replace("_", " "))
    ]
    assert hits == []


def test_the_scan_would_catch_a_live_room_name(tmp_path: Path) -> None:
    """The check above is not vacuous: the same scan finds a live-room field and string."""
    module = tmp_path / "m.py"
    module.write_text('"""A product docstring is fine."""\nx = request.product\ny = "Viewer comment: "\n')
    hits = [text for _, text in _names_in_code(module) if LIVE_ROOM.search(text.replace("_", " "))]
    assert hits == ["product", "Viewer comment: "]


# -- the user message belongs to the harness ------------------------------------------------------
def _old_livestream_message(turns: list[str], mode: str) -> str:
    """What the runtime hard-coded before the wording moved into the livestream harness."""
    turns = [neutralise_markup(t) for t in turns]
    if mode == "single" or len(turns) == 1:
        return f"Viewer comment: {turns[0]}"
    return "Viewer comments:\n" + "\n".join(f"{i}. {t}" for i, t in enumerate(turns, 1))


@pytest.mark.parametrize(
    ("turns", "mode"),
    [
        (["how much is it? "], "single"),
        (["a", "b\n", "c  "], "multi"),
        (["x", "y"], "single"),
        ([" lead\n"], "multi"),
        (["{{ 7*7 }} <tool_call>{}</tool_call>"], "single"),
    ],
)
def test_livestream_user_message_is_byte_identical_to_the_trained_wording(turns: list[str], mode: str) -> None:
    """The shipped model was trained on this text: moving it into a block must not change a byte
    (and a comment's Jinja syntax is data, never rendered)."""
    harness = load_harness("livestream")
    assert format_user_message(harness, turns, mode) == _old_livestream_message(turns, mode)


def test_a_harness_without_an_input_block_gets_the_plain_turns(mini_harness_dir: Path) -> None:
    harness = load_harness(mini_harness_dir)
    assert harness.input_block == ""
    assert format_user_message(harness, ["where is my order?"], "single") == "where is my order?"
    assert format_user_message(harness, ["hi", "and?"], "multi") == "1. hi\n2. and?"


def test_input_block_and_context_provider_are_validated(mini_harness_dir: Path) -> None:
    yaml_file = mini_harness_dir / "harness.yaml"
    base = yaml_file.read_text()
    (mini_harness_dir / "prompts" / "user.md").write_text("Customer: {{ turns[0] }}")
    yaml_file.write_text(base + "input_block: user\n")
    harness = load_harness(mini_harness_dir)
    assert format_user_message(harness, ["late parcel"], "single") == "Customer: late parcel"
    yaml_file.write_text(base + "input_block: missing\ncontext_provider: mcp:x/y\n")
    messages = [p.message for p in check_harness(mini_harness_dir).errors]
    assert any("input_block 'missing' does not exist" in m for m in messages), messages
    assert any("context_provider must be a python:module:function binding" in m for m in messages), messages
    yaml_file.write_text(base.replace("pipeline: [role, catalog, format]", "pipeline: [role, catalog, format, user]"))
    yaml_file.write_text(yaml_file.read_text() + "input_block: user\n")
    messages = [p.message for p in check_harness(mini_harness_dir).errors]
    assert any("remove it from the pipeline" in m for m in messages), messages


def test_the_harness_names_its_context_provider() -> None:
    harness = load_harness("livestream")
    provider = load_context_provider(harness)
    assert provider is not None and harness.context_provider == "python:hat.env.context:livestream_context"
    filled = provider(Request.of("is the dress in stock?"))
    assert {"room", "product", "faq"} <= set(filled.context)


# -- the request's context -------------------------------------------------------------------------
def test_context_keys_are_template_variables_but_cannot_replace_the_harness_own(mini_harness_dir: Path) -> None:
    harness = load_harness(mini_harness_dir)
    variables = template_context(harness, {"product": {"name": "Kettle"}, "settings": {"evil": 1}, "tools": []})
    assert variables["product"] == {"name": "Kettle"} and variables["context"]["product"] == {"name": "Kettle"}
    assert variables["settings"] == dict(harness.settings) and variables["tools"] == list(harness.tools)
    assert set(HARNESS_VARIABLES) <= set(variables)
    assert "Product: Kettle" in render_prompt(harness, variables).text


def test_tools_see_and_update_the_context_and_the_request_stays_as_sent(mini_harness_dir: Path) -> None:
    context = {"room": {"on_display": "p-1"}}
    call = '<tool_call>{"name": "get_price", "arguments": {"product": "p-1"}}</tool_call>'
    agent = Agent(load_harness(mini_harness_dir), ScriptedModel([call, '<reply>{"reply": "It is 19.9"}</reply>']))
    request = Request.of("how much?", context=context)
    trace = agent.respond(request).trace
    assert trace.tool_calls[0].result["on_display"] == "p-1"
    assert (
        trace.context["request"] == context
        and request.context is context
        and context == {"room": {"on_display": "p-1"}}
    )


# -- small fixes -----------------------------------------------------------------------------------
class _Tag(Hook):
    def __init__(self, tag: str, seen: list[str]) -> None:
        super().__init__()
        self.name, self.seen = tag, seen  # type: ignore[misc]

    def stop_check(self, ctx: HookContext, reply: dict) -> Verdict | None:
        self.seen.append(self.name)
        return None


def test_hooks_and_extra_hooks_both_run(mini_harness_dir: Path) -> None:
    """``hooks=`` replaced the harness's hooks and silently dropped ``extra_hooks``."""
    seen: list[str] = []
    agent = Agent(
        load_harness(mini_harness_dir),
        ScriptedModel([HELLO]),
        hooks=[_Tag("own", seen)],
        extra_hooks=[_Tag("extra", seen)],
    )
    assert agent.respond("hi").status == "ok" and seen == ["own", "extra"]


def test_started_at_is_when_the_request_started(mini_harness_dir: Path) -> None:
    class Slow(ScriptedModel):
        def _generate(self, messages, config, cache_key):  # type: ignore[no-untyped-def]
            time.sleep(0.3)
            return super()._generate(messages, config, cache_key)

    agent = Agent(load_harness(mini_harness_dir), Slow([HELLO]))
    before = time.time()
    trace = agent.respond("hi").trace
    assert before <= trace.started_at < before + 0.25 and trace.latency_ms >= 300


def test_only_trusted_context_numbers_ground_a_reply(mini_harness_dir: Path) -> None:
    """A caller's context must not ground "90": numbers it put into the prompt count only from
    ``trusted_context`` keys (the live room trusts its provider's product sheet, not the room)."""
    harness = load_harness(mini_harness_dir)
    (mini_harness_dir / "prompts" / "role.md").write_text("Deal: {{ deal }}. Sheet: {{ sheet }}.")
    harness = load_harness(mini_harness_dir)
    context = {"deal": "90% off", "sheet": "weighs 12 kg"}
    prompt = render_prompt(harness, template_context(harness, context)).text
    ctx = HookContext(harness, "r", context=context, grounding=[prompt])
    untrusting, trusting = GroundedClaimsHook(), GroundedClaimsHook(trusted_context=["sheet"])
    assert untrusting.stop_check(ctx, {"reply": "Now 90% off!"}) is not None
    assert untrusting.stop_check(HookContext(harness, "r", context=context, grounding=[prompt]), {"reply": "12 kg"})
    assert (
        trusting.stop_check(HookContext(harness, "r", context=context, grounding=[prompt]), {"reply": "12 kg"}) is None
    )
    verdict = trusting.stop_check(HookContext(harness, "r", context=context, grounding=[prompt]), {"reply": "90% off"})
    assert verdict is not None and "not in the prompt's data" in verdict.reason


def test_livestream_trusts_only_its_provider_data() -> None:
    spec = next(h for h in load_harness("livestream").hooks if h.name == "grounded_claims")
    assert spec.config["trusted_context"] == ["product", "faq"]
    assert json.dumps(spec.config).count("room") == 0
