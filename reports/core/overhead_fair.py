import json, statistics, sys, time
from hat.harness import Agent, Request, load_harness
from hat.env.context import livestream_context
from hat.models.scripted import ScriptedModel
CALL = '<tool_call>{"name": "get_price", "arguments": {"product": "%s"}}</tool_call>'
REPLY = '<reply>{"reply": "It is on sale today, check the price card!"}</reply>'
h = load_harness("livestream")
filled = livestream_context(Request.of("how much is it?"))
new = hasattr(filled, "turns")
room = filled.context["room"] if new else filled.room
agent = Agent(h, ScriptedModel([CALL % room["on_display"], REPLY], loop=True))  # no provider inside
def req(i):
    if new: return Request(turns=(f"how much is it? #{i}",), context=filled.context)
    return Request(comments=(f"how much is it? #{i}",), room=filled.room, product=filled.product, faq=filled.faq)
for i in range(30): agent.respond(req(i))
per=[]
for i in range(300):
    t = agent.respond(req(i)).trace
    assert t.status == "ok", t.context
    per.append(t.overhead_ms / len(t.rounds))
print(("new" if new else "old"), round(statistics.median(per), 3), round(statistics.mean(per), 3))
