"""ModelPool: several model copies serving generations side by side (hat.models.pool)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pytest

from hat.errors import ModelError, ModelSpecError
from hat.models.base import Finish, Generation, GenerationConfig, Message, ModelBackend
from hat.models.pool import ModelPool


class Member(ModelBackend):
    """A streaming backend that records its calls; ``gate`` (when set) holds each generation open,
    ``held`` is the prompt text its 'cache' holds (what the last call was shown)."""

    def __init__(self, name: str, gate: threading.Event | None = None, fail: bool = False) -> None:
        self.name = name
        self.gate = gate
        self.fail = fail
        self.held = ""
        self.started = threading.Event()
        self.calls = 0
        self.closed = False
        self.path = f"/weights/{name}.gguf"

    def reusable_prefix(self, messages: Sequence[Message]) -> int:
        prompt = "".join(m["content"] for m in messages)
        n = 0
        for a, b in zip(self.held, prompt, strict=False):
            if a != b:
                break
            n += 1
        return n

    def close(self) -> None:
        self.closed = True

    def _stream(
        self, messages: Sequence[Message], config: GenerationConfig, cache_key: str | None, finish: Finish
    ) -> Iterator[str]:
        self.calls += 1
        self.held = "".join(m["content"] for m in messages)
        out: list[str] = []
        try:
            self.started.set()
            if self.gate is not None:
                assert self.gate.wait(10), "test gate never opened"
            if self.fail:
                raise ModelError(f"{self.name} failed")
            for piece in (self.name, " says", " hi"):
                out.append(piece)
                yield piece
        finally:
            finish(Generation(text="".join(out), completion_tokens=len(out), cached_tokens=7))


def user(text: str) -> list[Message]:
    return [{"role": "user", "content": text}]


def test_a_pool_needs_members() -> None:
    with pytest.raises(ModelSpecError):
        ModelPool([])


def test_one_generation_goes_through_a_member_with_its_accounting() -> None:
    a = Member("a")
    pool = ModelPool([a], name="pooled")
    gen = pool.generate(user("hello"))
    assert gen.text == "a says hi"
    assert (gen.completion_tokens, gen.cached_tokens) == (3, 7)
    assert pool.name == "pooled" and pool.instances == 1 and pool.served == [1]


def test_two_generations_run_at_once_on_different_members() -> None:
    gate = threading.Event()
    a, b = Member("a", gate), Member("b", gate)
    pool = ModelPool([a, b])
    results: list[str] = []
    threads = [threading.Thread(target=lambda t=t: results.append(pool.generate(user(t)).text)) for t in ("x", "y")]
    for t in threads:
        t.start()
    # both members are inside a generation at the same time: neither waits for the other
    assert a.started.wait(5) and b.started.wait(5)
    gate.set()
    for t in threads:
        t.join(5)
    assert sorted(results) == ["a says hi", "b says hi"]
    assert pool.served == [1, 1]


def test_a_third_caller_waits_until_a_member_is_free() -> None:
    gate = threading.Event()
    a, b = Member("a", gate), Member("b", gate)
    pool = ModelPool([a, b])
    done: list[str] = []
    threads = [threading.Thread(target=lambda t=t: done.append(pool.generate(user(t)).text)) for t in "xyz"]
    for t in threads:
        t.start()
    assert a.started.wait(5) and b.started.wait(5)
    threads[2].join(0.2)
    assert done == [] and a.calls + b.calls == 2  # the third has not started a generation
    gate.set()
    for t in threads:
        t.join(5)
    assert len(done) == 3 and a.calls + b.calls == 3


def test_the_member_holding_the_longest_prefix_gets_the_next_round() -> None:
    a, b = Member("a"), Member("b")
    a.held = "SYSTEM|comment one|round 1"
    b.held = "SYSTEM|comment two"
    pool = ModelPool([a, b])
    assert pool.generate(user("SYSTEM|comment one|round 1|round 2")).text.startswith("a")
    assert pool.generate(user("SYSTEM|comment two|round 1")).text.startswith("b")


def test_ties_go_to_the_member_idle_the_longest() -> None:
    a, b = Member("a"), Member("b")
    pool = ModelPool([a, b])
    # nothing held anywhere: a (index 0, never used) first, then b, then a again
    first = pool.generate(user("p")).text[0]
    a.held = b.held = ""
    second = pool.generate(user("p")).text[0]
    a.held = b.held = ""
    third = pool.generate(user("p")).text[0]
    assert (first, second, third) == ("a", "b", "a")


def test_a_stream_closed_early_gives_its_member_back_and_reports_what_it_made() -> None:
    a = Member("a")
    pool = ModelPool([a])
    stream = pool.stream(user("hi"))
    assert next(stream) == "a"
    stream.close()
    assert stream.generation is not None and stream.generation.text == "a"
    assert pool.generate(user("again")).text == "a says hi"  # the member is free again


def test_a_failing_member_is_given_back() -> None:
    a = Member("a", fail=True)
    pool = ModelPool([a])
    for _ in range(2):  # the second call would block forever if the first kept the member
        with pytest.raises(ModelError):
            pool.generate(user("hi"))


def test_stop_strings_are_cut_once() -> None:
    pool = ModelPool([Member("a")])
    gen = pool.generate(user("hi"), GenerationConfig(stop=(" hi",)))
    assert gen.text == "a says"


def test_forwarded_attributes_and_close() -> None:
    a, b = Member("a"), Member("b")
    pool = ModelPool([a, b])
    assert pool.path == "/weights/a.gguf"  # the bandwidth bound reads the weights' file
    with pytest.raises(AttributeError):
        pool.generate_batch  # noqa: B018 - nothing else reaches a member around the checkout
    pool.close()
    assert a.closed and b.closed


def test_the_server_defaults_to_one_request_per_instance() -> None:
    from hat.serve.bench import _engine_name
    from hat.serve.cli import serve_defaults

    pool = ModelPool([Member("a"), Member("b"), Member("c")])
    concurrency, _, why = serve_defaults("llamacpp:smollm2-hat?instances=3", pool)
    assert concurrency == 3 and "pool of 3" in why
    assert serve_defaults("llamacpp:smollm2-hat", Member("a"))[0] == 1
    assert _engine_name(pool) == "3 × Member"


@pytest.mark.parametrize("spec", ["smollm2?instances=0", "smollm2?instances=two"])
def test_llamacpp_instances_must_be_a_positive_count(spec: str) -> None:
    from hat.models.llamacpp_backend import parse_llamacpp_spec

    with pytest.raises(ModelSpecError):
        parse_llamacpp_spec(spec)


def test_llamacpp_spec_accepts_instances() -> None:
    from hat.models.llamacpp_backend import parse_llamacpp_spec

    assert parse_llamacpp_spec("smollm2-hat?instances=2&threads=1") == ("smollm2-hat", {"instances": 2, "threads": 1})


@pytest.mark.parametrize("argument", ["?instances=0", "?instances=x"])
def test_smollm2_hat_instances_must_be_a_positive_count(argument: str) -> None:
    from hat.models import _hat_options

    with pytest.raises(ModelSpecError):
        _hat_options(argument)
    assert _hat_options("?engine=llamacpp&instances=2") == ("llamacpp", {"instances": 2})


def test_build_closes_the_members_it_made_when_one_fails() -> None:
    made: list[Member] = []

    def make() -> Member:
        if len(made) == 2:
            raise ModelError("out of memory")
        made.append(Member(f"m{len(made)}"))
        return made[-1]

    with pytest.raises(ModelError):
        ModelPool.build(make, 3)
    assert [m.closed for m in made] == [True, True]
    made.clear()
    assert ModelPool.build(make, 2, name="two").instances == 2
