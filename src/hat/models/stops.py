"""Stop strings: one rule for every backend, on whole texts and on streams of pieces.

A stop string ends the text and is *not* included in it (the OpenAI convention); with several,
the earliest occurrence wins. :func:`cut_stream_at_stop` applies the same rule to a stream of
pieces, where a stop string may span pieces: only the end of the text that could still begin a
stop string is held back, so pieces pass through unchanged unless they end in one (a TTS consumer
gets every word as soon as the model has it).

These live apart from the backends (and from the scripted test double, where they used to be)
because every backend must give the same answer: :class:`hat.models.base.ModelBackend` applies
them to every ``generate`` result and every ``stream``, so a backend only has to *stop
generating* at a stop string, never to cut the text itself.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence

__all__ = ["cut_stream_at_stop", "truncate_at_stop"]


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string; return the text and whether one was found."""
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def cut_stream_at_stop(pieces: Iterable[str], stop: Sequence[str]) -> Generator[str, None, None]:
    """Re-yield ``pieces`` up to (not including) the first stop string, which may span pieces.

    The longest end of the text so far that is the start of a stop string is held back until
    the next piece decides; the stream ends as soon as a stop string is complete.
    """
    stops = [s for s in stop if s]
    source = iter(pieces)
    try:
        if not stops:
            yield from source
            return
        pending = ""
        for piece in source:
            pending += piece
            text, hit = truncate_at_stop(pending, stops)
            if hit:
                if text:
                    yield text
                return
            safe = len(pending) - _stop_start(pending, stops)
            if safe > 0:
                yield pending[:safe]
                pending = pending[safe:]
        if pending:
            yield pending
    finally:
        # Stopping early (or the caller closing us) must also stop the producer, e.g. a
        # generation thread or an open HTTP response.
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _stop_start(text: str, stops: Sequence[str]) -> int:
    """The length of the longest end of ``text`` that is the beginning of a stop string."""
    longest = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:n]):
                longest = n
                break
    return longest
