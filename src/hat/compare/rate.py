"""The blind rating page: a person reads a pair and picks A, B or tie (``hat compare rate``).

Plain server-rendered HTML from a FastAPI app, no script and no external asset, so it works
offline and in any browser. The page shows what a viewer would judge on — the comment, the
dialogue so far, the reference facts, the two replies — and folds each reply's tool calls away
(tool names can differ between harness versions and give a side away). It never shows the key,
the systems' names, the judges' scores or a running tally: the rater stays blind until
``hat compare tally`` unblinds the ratings.

Decisions:

- **One rater per server**, named at start (``--rater``); ratings go to
  ``ratings-<rater>.jsonl`` beside the pairs, one line per click (fsynced), in the same rows as
  the judges' and the LLM's, so the same tally reads all three. Re-rating a pair appends a line;
  the tally keeps the last. A restarted server resumes at the first unrated pair.
- **Escaped by default**: comments are hostile input, so templates render with jinja2's
  autoescape on.
- **A local tool, guarded like one**: the ``Host`` header must be a loopback name (stops DNS
  rebinding) and every form carries a per-server random token (stops another site's page from
  posting ratings through the rater's browser). Form bodies are small and parsed with the
  standard library (no multipart dependency).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qs

import jinja2
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.middleware.trustedhost import TrustedHostMiddleware

from hat.compare.pairwise import Pair, Rating, as_verdict, load_ratings, ratings_path, read_pairs, write_ratings

__all__ = ["LOOPBACK_HOSTS", "create_rating_app"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
MAX_FORM_BYTES = 4096

_PAGE = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string("""\
<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 70rem; margin: 1.5rem auto; padding: 0 1rem; color: #222; }
.comment { background: #eef4ff; padding: .8rem 1rem; border-radius: .4rem; white-space: pre-wrap; }
.replies { display: flex; gap: 1rem; margin: 1rem 0; }
.reply { flex: 1; border: 1px solid #ccc; border-radius: .4rem; padding: .8rem 1rem; }
.reply p { white-space: pre-wrap; }
.muted { color: #666; font-size: .9rem; }
form.choices { display: flex; gap: 1rem; justify-content: center; }
form.choices button { font-size: 1.1rem; padding: .6rem 1.6rem; cursor: pointer; }
pre { white-space: pre-wrap; font-size: .8rem; }
</style></head>
<body>
<p class="muted">{{ progress }}</p>
{% if pair is none %}
<h1>All pairs rated</h1>
<p>Thank you. {{ rated }} of {{ total }} pairs are rated. You can close this page.</p>
{% else %}
<h1>Which reply is better?</h1>
{% if pair.history %}<h2>Dialogue so far</h2>
<ul>{% for m in pair.history %}<li><b>{{ m.get("role", "") }}</b>: {{ m.get("content", "") }}</li>{% endfor %}</ul>
{% endif %}
<h2>Viewer comment</h2>
{% for c in pair.comments %}<div class="comment">{{ c }}</div>{% endfor %}
<p class="muted">Reference facts: {{ pair.facts | join("; ") if pair.facts else "(none)" }}</p>
<div class="replies">
{% for label, side in sides %}
<div class="reply" id="reply-{{ label }}"><h2>Reply {{ label }}</h2><p>{{ side.reply }}</p>
{% if side.tools %}<details><summary class="muted">{{ side.tools | length }} tool call(s)</summary>
{% for t in side.tools %}<pre>{{ t.name }}({{ t.arguments }}) → {{ t.status }}: {{ t.result }}</pre>{% endfor %}
</details>{% endif %}
</div>
{% endfor %}
</div>
<form class="choices" method="post" action="/rate">
<input type="hidden" name="pair_id" value="{{ pair.pair_id }}">
<input type="hidden" name="token" value="{{ token }}">
<button name="verdict" value="A" id="pick-A">A is better</button>
<button name="verdict" value="tie" id="pick-tie">Tie</button>
<button name="verdict" value="B" id="pick-B">B is better</button>
</form>
{% if current %}<p class="muted">Your earlier choice for this pair: {{ current }}</p>{% endif %}
{% endif %}
</body></html>
""")


class _Ratings:
    """The rater's ratings so far (last per pair), kept in memory and appended to the file."""

    def __init__(self, path: Path, rater: str) -> None:
        self.path, self.rater = path, rater
        self.lock = threading.Lock()
        existing = load_ratings(path).get(rater, []) if path.is_file() else []
        self.verdicts = {r.pair_id: r.verdict for r in existing}

    def add(self, rating: Rating) -> None:
        with self.lock:
            write_ratings(self.path, [rating])
            self.verdicts[rating.pair_id] = rating.verdict


def create_rating_app(
    folder: str | Path, *, rater: str = "human", allowed_hosts: Sequence[str] = LOOPBACK_HOSTS
) -> FastAPI:
    """The rating page over the pairs in ``folder`` (as ``hat compare pairwise`` wrote them)."""
    pairs = read_pairs(folder)
    by_id = {p.pair_id: p for p in pairs}
    ratings = _Ratings(ratings_path(folder, rater), rater)
    token = secrets.token_urlsafe(24)
    app = FastAPI(title="HAT blind rating", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))

    def page(pair: Pair | None) -> HTMLResponse:
        rated = len(ratings.verdicts.keys() & by_id.keys())
        position = f"pair {pairs.index(pair) + 1} of {len(pairs)} · " if pair is not None else ""
        html = _PAGE.render(
            title="HAT blind rating",
            progress=f"{position}{rated} of {len(pairs)} rated · rater {rater}",
            pair=pair,
            sides=[("A", pair.a), ("B", pair.b)] if pair is not None else [],
            token=token,
            current=ratings.verdicts.get(pair.pair_id, "") if pair is not None else "",
            rated=rated,
            total=len(pairs),
        )
        return HTMLResponse(html)

    @app.get("/", response_class=HTMLResponse)
    def next_pair() -> HTMLResponse:
        return page(next((p for p in pairs if p.pair_id not in ratings.verdicts), None))

    @app.get("/pair/{pair_id}", response_class=HTMLResponse)
    def show_pair(pair_id: str) -> HTMLResponse:
        if pair_id not in by_id:
            raise HTTPException(404, "no such pair")
        return page(by_id[pair_id])

    @app.post("/rate")
    async def rate(request: Request) -> RedirectResponse:
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "form too large")
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        if not secrets.compare_digest(form.get("token", ""), token):
            raise HTTPException(403, "stale or missing form token; reload the page")
        pair_id, verdict = form.get("pair_id", ""), as_verdict(form.get("verdict"))
        if pair_id not in by_id or verdict is None:
            raise HTTPException(422, "pick A, B or tie for a pair of this comparison")
        ratings.add(Rating(pair_id, rater, verdict, "rating page"))
        return RedirectResponse("/", status_code=303)

    return app
