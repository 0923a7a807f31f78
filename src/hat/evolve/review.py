"""Confirm: the review page — a person reads the cluster, example traces, the diff side by side and
the paired evaluation, then approves, rejects, or edits and approves, with a note.

Routes (a FastAPI ``APIRouter``, so the same page can be mounted in another app)::

    GET  /login?token=…                 sets the session cookie, then redirects to /
    GET  /                              proposals and their status
    GET  /lineage                       the versions
    GET  /proposals/{id}                one proposal (the page described above)
    POST /proposals/{id}/approve        form: note, reviewer, csrf  → a new lineage version
    POST /proposals/{id}/reject         form: note, reviewer, csrf  → a review event
    POST /proposals/{id}/edit           form: file:<path> = new text, note, reviewer, csrf
    GET  /api/proposals, /api/lineage   the same data as JSON

Trust: approving changes the harness a production agent will run, so every route needs the
review token, as ``hat serve``'s reload needs its admin token — either ``Authorization: Bearer
<token>`` (scripts; compared in constant time) or the cookie that ``/login?token=…`` sets
(``HttpOnly``, ``SameSite=Strict``). A form POST authenticated by the cookie must also carry the
page's CSRF token (an HMAC of the review token), so another site cannot make a logged-in
browser approve anything. The ``Host`` header must name the server (DNS rebinding), as in
``hat serve``. Pages carry a Content-Security-Policy that allows no script and no outside
resource. Edits may change harness.yaml, skills, tools and prompts, never ``hooks.py``
(:data:`~hat.evolve.propose.EDITABLE`), and are validated before anything is recorded.

A POST answers with a redirect to the proposal page (browsers), or JSON when the client asks for
``application/json`` (scripts and tests).
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import html
import secrets
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from hat.errors import HarnessValidationError, HatError
from hat.evolve.lineage import Lineage, harness_files
from hat.evolve.propose import Proposal, ProposalStore, edit_files
from hat.evolve.templates import render
from hat.serve.limits import LOOPBACK_HOSTS, HostCheck

__all__ = ["COOKIE", "create_review_app", "review_router"]

COOKIE = "hat_review"
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'"


class _Denied(HTTPException):
    """A refusal; FastAPI answers it as JSON wherever the router is mounted (the review app renders
    it as a page for browsers)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)


def _csrf_token(token: str) -> str:
    return hmac.new(token.encode(), b"hat-evolve-review-csrf", hashlib.sha256).hexdigest()


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status, headers={"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff"})


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


class _Review:
    """The state behind the routes: the lineage, its proposals and the token."""

    def __init__(self, lineage: Lineage, token: str) -> None:
        self.lineage = lineage
        self.store = ProposalStore(lineage)
        self.token = token
        self.csrf = _csrf_token(token)

    def auth(self, request: Request) -> str:
        """``bearer`` or ``cookie``; raises :class:`_Denied` (401) otherwise."""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer ") and secrets.compare_digest(
            header[7:].strip().encode(), self.token.encode()
        ):
            return "bearer"
        cookie = request.cookies.get(COOKIE, "")
        if cookie and secrets.compare_digest(cookie.encode(), self.token.encode()):
            return "cookie"
        raise _Denied(401, "open the address `hat evolve review` printed (it carries ?token=…), or send the token")

    # -- views ------------------------------------------------------------------------------------
    def common(self) -> dict[str, Any]:
        return {"head": self.lineage.head(), "csrf": self.csrf}

    def proposals(self) -> list[dict[str, Any]]:
        return [{**p.to_dict(), "status": self.store.status(p.id)} for p in reversed(self.store.all())]

    def diffs(self, proposal: Proposal) -> list[dict[str, Any]]:
        old = harness_files(self.lineage.folder(proposal.base_hash))
        new = harness_files(self.store.folder(proposal.id))
        table = difflib.HtmlDiff(wrapcolumn=78)
        out = []
        for path in sorted(set(old) | set(new)):
            a, b = old.get(path, ""), new.get(path, "")
            if a != b:
                html = table.make_table(a.splitlines(), b.splitlines(), f"old {path}", f"new {path}", context=True)
                out.append({"path": path, "table": html, "new": b, "rows": min(30, b.count("\n") + 3)})
        return out

    def get(self, pid: str) -> Proposal:
        try:
            return self.store.get(pid)
        except HatError:
            raise _Denied(404, f"no proposal {pid!r}") from None

    def proposal_page(self, pid: str, message: str = "", error: bool = False) -> str:
        proposal = self.get(pid)
        review = self.lineage.reviews().get(pid, {})
        version = next((v for v in self.lineage.versions().values() if v.proposal_id == pid), None)
        return render(
            "proposal",
            p=proposal,
            c=proposal.cluster or {},
            ev=proposal.evaluation,
            diffs=self.diffs(proposal),
            status=self.store.status(pid),
            review=review,
            version=version,
            message=message,
            error=error,
            **self.common(),
        )

    # -- decisions --------------------------------------------------------------------------------
    def pending(self, pid: str) -> Proposal:
        proposal = self.get(pid)
        status = self.store.status(pid)
        if status != "pending":
            raise _Denied(409, f"proposal {pid} is already {status}")
        return proposal

    def approve(self, pid: str, reviewer: str, note: str, files: dict[str, str] | None = None) -> dict[str, Any]:
        proposal = self.pending(pid)
        if files:
            harness = edit_files(self.store.folder(pid), files)
            proposer = f"{proposal.proposer}; edited by {reviewer or 'reviewer'}"
        else:
            harness, proposer = self.store.harness(pid), proposal.proposer
        version = self.lineage.add_version(
            harness,
            parent=proposal.base_hash,
            proposer=proposer,
            rationale=proposal.rationale,
            proposal_id=pid,
            reviewer=reviewer,
            note=note,
        )
        return {"proposal": pid, "decision": "approved", "version": version.hash, "edited": bool(files)}

    def reject(self, pid: str, reviewer: str, note: str) -> dict[str, Any]:
        self.pending(pid)
        self.lineage.record_review(pid, "rejected", reviewer=reviewer, note=note)
        return {"proposal": pid, "decision": "rejected"}


async def _form(review: _Review, request: Request, how: str) -> dict[str, str]:
    form = await request.form()
    data = {k: v for k, v in form.items() if isinstance(v, str)}
    if how == "cookie" and not secrets.compare_digest(data.get("csrf", "").encode(), review.csrf.encode()):
        raise _Denied(403, "the form's CSRF token is missing or wrong; reload the page and try again")
    return data


def review_router(lineage: Lineage, token: str) -> APIRouter:
    """The routes of the module docstring for ``lineage``, guarded by ``token``."""
    review = _Review(lineage, token)
    router = APIRouter()

    def auth(request: Request) -> str:
        return review.auth(request)

    @router.get("/login")
    async def login(token: str = "") -> Response:
        if not token or not secrets.compare_digest(token.encode(), review.token.encode()):
            raise _Denied(401, "that token is not this review server's")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, review.token, httponly=True, samesite="strict")
        return response

    @router.get("/", response_class=HTMLResponse)
    async def index(_: str = Depends(auth)) -> Response:
        return _html(render("index", proposals=review.proposals(), **review.common()))

    @router.get("/lineage", response_class=HTMLResponse)
    async def lineage_page(_: str = Depends(auth)) -> Response:
        versions = list(reversed(list(review.lineage.versions().values())))
        return _html(render("lineage", versions=versions, **review.common()))

    @router.get("/proposals/{pid}", response_class=HTMLResponse)
    async def proposal(pid: str, done: str = "", _: str = Depends(auth)) -> Response:
        return _html(review.proposal_page(pid, f"Proposal {done}." if done in ("approved", "rejected") else ""))

    async def decide(request: Request, pid: str, how: str, action: str) -> Response:
        data = await _form(review, request, how)
        reviewer, note = data.get("reviewer", "").strip()[:80], data.get("note", "").strip()[:2000]
        try:
            if action == "reject":
                result = review.reject(pid, reviewer, note)
            else:
                files = {k[5:]: v for k, v in data.items() if k.startswith("file:")} if action == "edit" else None
                result = review.approve(pid, reviewer, note, files)
        except HarnessValidationError as exc:
            if _wants_json(request):
                return JSONResponse({"error": str(exc), "problems": [str(p) for p in exc.problems]}, 422)
            return _html(review.proposal_page(pid, f"Not recorded: {exc}", error=True), 422)
        except HatError as exc:  # e.g. the same harness is already a version
            raise _Denied(409, str(exc)) from None
        if _wants_json(request):
            return JSONResponse(result)
        return RedirectResponse(f"/proposals/{pid}?done={result['decision']}", status_code=303)

    @router.post("/proposals/{pid}/approve")
    async def approve(request: Request, pid: str, how: str = Depends(auth)) -> Response:
        return await decide(request, pid, how, "approve")

    @router.post("/proposals/{pid}/reject")
    async def reject(request: Request, pid: str, how: str = Depends(auth)) -> Response:
        return await decide(request, pid, how, "reject")

    @router.post("/proposals/{pid}/edit")
    async def edit(request: Request, pid: str, how: str = Depends(auth)) -> Response:
        return await decide(request, pid, how, "edit")

    @router.get("/api/proposals")
    async def api_proposals(_: str = Depends(auth)) -> JSONResponse:
        return JSONResponse(review.proposals())

    @router.get("/api/lineage")
    async def api_lineage(_: str = Depends(auth)) -> JSONResponse:
        return JSONResponse([v.to_dict() for v in review.lineage.chain()])

    return router


def create_review_app(
    lineage: Lineage, token: str | None = None, allowed_hosts: Sequence[str] | None = None
) -> FastAPI:
    """The review page as its own app (``hat evolve review`` serves it with uvicorn). ``token``:
    ``None`` makes a random one (``app.state.token``)."""
    token = token or secrets.token_urlsafe(24)
    app = FastAPI(title="HAT evolve review", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(review_router(lineage, token))
    app.state.token = token

    @app.exception_handler(_Denied)
    async def denied(request: Request, exc: _Denied) -> Response:
        if _wants_json(request) or request.method != "GET":
            return JSONResponse({"error": exc.detail}, exc.status_code)
        return _html(f"<!doctype html><title>HAT evolve</title><p>{html.escape(str(exc.detail))}</p>", exc.status_code)

    app.add_middleware(HostCheck, allowed_hosts=list(allowed_hosts or LOOPBACK_HOSTS))
    return app
