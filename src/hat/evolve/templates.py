"""The review page's HTML: Jinja templates kept as strings, so they ship inside the module (no
package-data step) and the page needs nothing from the internet — no CDN, no script at all; the
style sheet is inline and the forms are plain HTML forms. Autoescaping is on: traces carry viewer
comments and model output, which are untrusted text."""

from __future__ import annotations

import jinja2

__all__ = ["render"]

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}HAT evolve{% endblock %}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1280px;padding:1rem 1.5rem;color:#1d232b}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:1.8rem;border-bottom:1px solid #dde3ea}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #dde3ea;padding:.25rem .5rem;text-align:left;
vertical-align:top}th{background:#f3f6f9}code,pre{font:12px/1.4 ui-monospace,monospace}
pre{background:#f6f8fa;padding:.5rem;overflow-x:auto;white-space:pre-wrap}
.pill{display:inline-block;border-radius:.6rem;padding:0 .5rem;font-size:12px;background:#e6ebf1}
.pending{background:#fff3cd}.approved,.promoted,.better{background:#d4edda}.rejected,.blocked,.worse{background:#f8d7da}
.same{background:#e6ebf1}.root{background:#d6e4ff}
.ci{position:relative;width:220px;height:14px;background:#f3f6f9;border:1px solid #dde3ea}
.ci .zero{position:absolute;left:50%;top:0;bottom:0;border-left:1px dashed #889}
.ci .bar{position:absolute;top:3px;height:8px;background:#5b8def;min-width:2px}
table.diff{font:12px ui-monospace,monospace;width:100%}table.diff td{border:none;padding:0 .3rem;white-space:pre-wrap}
.diff_header{background:#f3f6f9;color:#889}.diff_next{display:none}.diff_add{background:#cdfbd3}
.diff_chg{background:#fff0b3}.diff_sub{background:#fdd}
textarea{width:100%;font:12px ui-monospace,monospace}form.inline{display:inline-block;margin-right:1rem}
.msg{padding:.5rem 1rem;border-radius:.3rem;background:#d4edda}.err{background:#f8d7da}
button{padding:.3rem .9rem;font-size:14px}
</style></head><body>
<p><a href="/">Proposals</a> · <a href="/lineage">Lineage</a> · head <code>{{ head.short }}</code></p>
{% if message %}<p class="msg {{ 'err' if error else '' }}" id="message">{{ message }}</p>{% endif %}
{% block body %}{% endblock %}
</body></html>
"""

_INDEX = """{% extends "base" %}{% block body %}
<h1>Harness evolution — proposals</h1>
{% if not proposals %}<p>No proposals yet. Make some with <code>hat evolve propose</code>.</p>{% endif %}
<table><tr><th>proposal</th><th>status</th><th>cluster</th><th>kind</th><th>proposer</th><th>base</th></tr>
{% for p in proposals %}<tr>
<td><a href="/proposals/{{ p.id }}">{{ p.id }}</a></td><td><span class="pill {{ p.status }}">{{ p.status }}</span></td>
<td>{{ p.cluster.get('id', '') }} {{ p.cluster.get('key', {}) | dictsort | map('join', '=') | join(', ') }}</td>
<td>{{ p.kind }}</td><td>{{ p.proposer }}</td><td><code>{{ p.base_hash[:12] }}</code></td></tr>{% endfor %}
</table>{% endblock %}
"""

_LINEAGE = """{% extends "base" %}{% block body %}
<h1>Lineage</h1>
<table id="lineage"><tr><th>version</th><th>status</th><th>parent</th><th>proposer</th><th>reviewer</th>
<th>rationale</th><th>gate</th></tr>
{% for v in versions %}<tr><td><code>{{ v.short }}</code></td><td><span class="pill {{ v.status }}">{{ v.status }}</span></td>
<td><code>{{ (v.parent or '')[:12] }}</code></td><td>{{ v.proposer }}</td><td>{{ v.reviewer }}{% if v.note %}: {{ v.note }}{% endif %}</td>
<td>{{ v.rationale }}</td><td>{% if v.gate %}{{ v.gate.decision }}: {{ v.gate.reasons | join('; ') }}{% endif %}</td></tr>
{% endfor %}</table>{% endblock %}
"""  # noqa: E501

_PROPOSAL = """{% extends "base" %}{% block title %}{{ p.id }} · HAT evolve{% endblock %}{% block body %}
<h1>Proposal {{ p.id }} <span class="pill {{ status }}" id="status">{{ status }}</span></h1>
<p><b>{{ p.proposer }}</b> — {{ p.rationale }}</p>
<p>Base <code>{{ p.base_hash[:12] }}</code> → new <code>{{ p.new_hash[:12] }}</code></p>

<h2>Failure cluster {{ c.get('id', '') }}</h2>
{% if c %}<table>{% for k, v in c.get('key', {}) | dictsort %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}
<tr><th>kind</th><td>{{ c.kind }}</td></tr><tr><th>episodes</th><td>{{ c.n }}</td></tr>
<tr><th>impact</th><td>{{ c.impact }} points of the overall score</td></tr>
<tr><th>reasons</th><td>{% for r in c.get('reasons') or [] %}{{ r.reason }} (×{{ r.n }})<br>{% endfor %}</td></tr></table>
{% else %}<p>Not tied to a cluster.</p>{% endif %}

<h2>Example traces</h2>
{% for e in c.get('examples', []) %}<details {% if loop.first %}open{% endif %}><summary><code>{{ e.episode_id }}</code>
({{ e.intent }}, status {{ e.status }})</summary>
<table><tr><th>viewer</th><td>{{ (e.get('comments') or []) | join(' / ') }}</td></tr>
<tr><th>skills loaded</th><td>{{ (e.get('skills_loaded') or []) | join(', ') or '—' }}</td></tr>
<tr><th>tool calls</th><td>{% for t in e.get('tool_calls') or [] %}<code>{{ t.name }}({{ t.arguments | tojson }})</code> → {{ t.status }}<br>
{% else %}none{% endfor %}</td></tr><tr><th>reply</th><td>{{ e.reply }}</td></tr>
<tr><th>judges</th><td>{% for d, r in (e.get('reasons') or {}) | dictsort %}{{ d }} {{ '%.2f' | format((e.get('scores') or {}).get(d, 0)) }}: {{ r }}<br>{% endfor %}</td></tr>
</table>{% for r in e.get('rounds') or [] %}<pre>round {{ loop.index }} ({{ r.action }}): {{ r.output }}</pre>{% endfor %}</details>
{% else %}<p>No example traces.</p>{% endfor %}

<h2>Proposed change</h2>
{% for f in diffs %}<h3><code>{{ f.path }}</code></h3>{{ f.table | safe }}{% endfor %}
<details><summary>unified diff</summary><pre>{{ p.patch }}</pre></details>

<h2>Evaluation: old vs new, paired</h2>
{% if ev %}<p>{{ ev.settings.suites | join(', ') }} · n = {{ ev.settings.n }} · seed {{ ev.settings.seed }} ·
model <code>{{ ev.settings.model }}</code> · {{ (ev.settings.confidence * 100) | round | int }} % paired bootstrap CI ·
gate preview: <span class="pill {{ ev.decision }}">{{ ev.decision }}</span> — {{ ev.reasons | join('; ') }}</p>
<table id="evaluation"><tr><th>suite</th><th>slice</th><th>dimension</th><th>n</th><th>old</th><th>new</th><th>Δ</th>
<th>CI</th><th></th><th>verdict</th></tr>
{% for cell in ev.cells %}<tr><td>{{ cell.suite }}</td><td>{{ cell.slice }}</td><td>{{ cell.dim }}</td><td>{{ cell.n }}</td>
<td>{{ '%.1f' | format(cell.old) }}</td><td>{{ '%.1f' | format(cell.new) }}</td><td>{{ '%+.1f' | format(cell.diff) }}</td>
<td>[{{ '%+.1f' | format(cell.lo) }}, {{ '%+.1f' | format(cell.hi) }}]</td>
<td><div class="ci"><div class="zero"></div><div class="bar" style="left:{{ (cell.lo + 100) / 2 }}%;width:{{ (cell.hi - cell.lo) / 2 }}%"></div></div></td>
<td><span class="pill {{ cell.verdict }}">{{ cell.verdict }}</span></td></tr>{% endfor %}</table>
{% else %}<p>Not evaluated yet: <code>hat evolve propose … --evaluate</code> or <code>hat evolve gate</code> after approval.</p>{% endif %}

<h2>Decision</h2>
{% if status == 'pending' %}
<form class="inline" method="post" action="/proposals/{{ p.id }}/approve">
<input type="hidden" name="csrf" value="{{ csrf }}"><label>Reviewer <input name="reviewer" value="reviewer"></label>
<label>Note <input name="note" id="approve-note" size="40"></label> <button id="approve" type="submit">Approve</button></form>
<form class="inline" method="post" action="/proposals/{{ p.id }}/reject">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="reviewer" value="reviewer">
<label>Note <input name="note" size="30"></label> <button id="reject" type="submit">Reject</button></form>
<h3>Edit and approve</h3>
<form method="post" action="/proposals/{{ p.id }}/edit"><input type="hidden" name="csrf" value="{{ csrf }}">
{% for f in diffs %}<label><code>{{ f.path }}</code><textarea name="file:{{ f.path }}" rows="{{ f.rows }}">{{ f.new }}</textarea></label>
{% endfor %}<label>Reviewer <input name="reviewer" value="reviewer"></label> <label>Note <input name="note" size="40"></label>
<button id="edit-approve" type="submit">Save edit and approve</button></form>
{% else %}<p>Decided: <b>{{ status }}</b>{% if review.reviewer %} by {{ review.reviewer }}{% endif %}
{% if review.note %} — “{{ review.note }}”{% endif %}{% if version %} · version <code id="version">{{ version.short }}</code>
<span class="pill {{ version.status }}">{{ version.status }}</span>{% endif %}</p>{% endif %}
{% endblock %}
"""  # noqa: E501

_ENV = jinja2.Environment(
    loader=jinja2.DictLoader({"base": _BASE, "index": _INDEX, "lineage": _LINEAGE, "proposal": _PROPOSAL}),
    autoescape=True,
    undefined=jinja2.ChainableUndefined,
)


def render(name: str, **context: object) -> str:
    return _ENV.get_template(name).render(**context)
