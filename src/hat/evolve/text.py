"""Vectors for failure texts (judge reasons, comments): a sentence-embedding model where one ships
offline, else TF-IDF; and the two small operations diagnosis needs on them.

Backends, in the order ``auto`` tries them:

- ``wordllama``: WordLlama's ``l2_supercat`` 256-dimensional static embeddings, whose weights and
  tokenizer ship *inside* the PyPI wheel (``pip install wordllama``, ~19 MB), so they load offline
  in ~0.1 s on a CPU. (The package looks for its bundled tokenizer in a folder it does not ship
  under that name and would then try to download it; passing the package folder as ``cache_dir``
  with downloads disabled makes it use the bundled file.)
- ``tfidf``: scikit-learn's ``TfidfVectorizer`` when installed, else the same formula by hand
  (raw term counts, ``idf = ln((1 + n) / (1 + df)) + 1``, L2-normalised rows, tokens of two or
  more word characters) — tested equal to scikit-learn's.

Why not a transformer sentence encoder: none ships its weights inside a PyPI package, and HAT
downloads nothing at run time. Failure reasons are short, templated judge sentences ("X not
called", "none of [...] loaded"), for which TF-IDF already separates the kinds; the embedding mainly
groups paraphrased free text (viewer comments, LLM-judge reasons).

Vectors are plain lists of floats, L2-normalised, so cosine similarity is a dot product.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["BACKENDS", "centroid_order", "embed", "tfidf", "threshold_clusters", "top_terms"]

BACKENDS = ("auto", "wordllama", "tfidf")
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _normalise(rows: list[list[float]]) -> list[list[float]]:
    out = []
    for row in rows:
        norm = math.sqrt(sum(x * x for x in row))
        out.append([x / norm for x in row] if norm else list(row))
    return out


def tfidf(texts: Sequence[str], *, use_sklearn: bool = True) -> tuple[list[list[float]], list[str]]:
    """TF-IDF rows (L2-normalised) and the vocabulary, scikit-learn's defaults either way."""
    if use_sklearn:
        try:
            from sklearn.feature_extraction.text import TfidfVectorizer
        except ImportError:
            pass
        else:
            vectorizer = TfidfVectorizer()
            try:
                matrix = vectorizer.fit_transform(list(texts))
            except ValueError:  # no token in any text
                return [[] for _ in texts], []
            return matrix.toarray().tolist(), list(vectorizer.get_feature_names_out())
    counts = [Counter(_tokens(t)) for t in texts]
    vocab = sorted({w for c in counts for w in c})
    df = Counter(w for c in counts for w in c)
    n = len(texts)
    idf = {w: math.log((1 + n) / (1 + df[w])) + 1 for w in vocab}
    return _normalise([[c[w] * idf[w] for w in vocab] for c in counts]), vocab


@functools.lru_cache(maxsize=1)
def _wordllama() -> Any:
    import wordllama
    from wordllama import WordLlama

    return WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)


def wordllama_available() -> bool:
    try:
        _wordllama()
    except Exception:  # not installed, or its bundled files missing: fall back to TF-IDF
        return False
    return True


def embed(texts: Sequence[str], backend: str = "auto") -> tuple[str, list[list[float]]]:
    """``(backend used, vectors)``; ``auto`` takes WordLlama when it loads offline, else TF-IDF."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown text backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend in ("auto", "wordllama") and texts and wordllama_available():
        vectors = _wordllama().embed(list(texts), norm=True)
        return "wordllama:l2_supercat_256", _normalise([[float(x) for x in row] for row in vectors])
    if backend == "wordllama":
        raise ValueError("the wordllama backend is not available: pip install wordllama")
    rows, _ = tfidf(texts)
    return "tfidf", rows


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=False))


def centroid_order(vectors: Sequence[Sequence[float]]) -> list[int]:
    """Indices sorted by similarity to the group's centroid, most typical first (ties: index)."""
    if not vectors:
        return []
    dim = max(len(v) for v in vectors)
    centroid = [sum(v[i] for v in vectors if i < len(v)) / len(vectors) for i in range(dim)]
    return sorted(range(len(vectors)), key=lambda i: (-round(_dot(vectors[i], centroid), 9), i))


def threshold_clusters(vectors: Sequence[Sequence[float]], threshold: float = 0.6) -> list[int]:
    """Greedy leader clustering: each vector joins the first cluster whose leader it matches with
    cosine ≥ ``threshold``, else leads a new one. Deterministic (input order); labels from 0."""
    leaders: list[int] = []
    labels = []
    for i, vector in enumerate(vectors):
        label = next((k for k, lead in enumerate(leaders) if _dot(vectors[lead], vector) >= threshold), None)
        if label is None:
            leaders.append(i)
            label = len(leaders) - 1
        labels.append(label)
    return labels


def top_terms(texts: Sequence[str], k: int = 5) -> list[str]:
    """The ``k`` most frequent content words of ``texts`` (ties: alphabetical)."""
    counts = Counter(w for t in texts for w in set(_tokens(t)) if not w.isdigit())
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
