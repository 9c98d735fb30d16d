"""Property tests of the scrubber over nested containers: a secret under a secret-looking key never
survives, whether the structure is scrubbed as data (``scrub_value``) or printed the way vLLM logs
its arguments (``non-default args: {...}``, a Python repr) and scrubbed as text (``scrub_text``)."""

from __future__ import annotations

import json

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from remote.secrets import MASK, is_secret_name, may_hold_secret, scrub_text, scrub_value

SECRET_KEYS = st.sampled_from(["api_key", "hf_token", "HF_TOKEN", "password", "db_password", "OPENAI_API_KEY",
                               "secret", "aws_secret_access_key", "authorization", "credentials"])
PLAIN_KEYS = st.sampled_from(["model", "max_model_len", "tensor_parallel_size", "served_model_name", "port",
                              "limit_mm_per_prompt", "rules", "dtype", "max_num_seqs"])
#: Secrets made of the characters real keys use (the marker makes each one findable).
SECRETS = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", min_size=6, max_size=24) \
    .map(lambda s: f"S3CR3T{s}")
PLAIN = st.one_of(st.integers(-5, 10**6), st.booleans(), st.none(),
                  st.text("abcdefghijklmnopqrstuvwxyz0123456789/.", max_size=12))


def _secret_value():
    """What vLLM may hold under a secret key: a string, or a (nested) list or tuple of strings."""
    return st.recursive(SECRETS, lambda inner: st.one_of(st.lists(inner, min_size=1, max_size=3),
                                                        st.lists(inner, min_size=1, max_size=3).map(tuple)),
                        max_leaves=4)


def _tree():
    """Nested dicts/lists/tuples of plain values, some dicts holding a secret under a secret key."""
    leaf = PLAIN
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(PLAIN_KEYS, inner, max_size=3),
            st.tuples(st.dictionaries(PLAIN_KEYS, inner, max_size=2), SECRET_KEYS, _secret_value())
            .map(lambda t: {**t[0], t[1]: t[2]}),
        ),
        max_leaves=12,
    )


def _secrets_in(value: object) -> list[str]:
    text = repr(value)
    return [part.split("'")[0].split('"')[0] for part in text.split("S3CR3T")[1:]]


@settings(max_examples=300, deadline=None)
@given(_tree())
def test_scrub_value_leaves_no_secret_in_nested_containers(tree: object) -> None:
    scrubbed = scrub_value(tree)
    assert "S3CR3T" not in json.dumps(scrubbed)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.one_of(PLAIN_KEYS, SECRET_KEYS), _tree(), max_size=4), SECRET_KEYS, _secret_value())
def test_scrub_text_of_vllms_non_default_args_line(args: dict, key: str, secret: object) -> None:
    args = {**args, key: secret}
    line = f"(APIServer pid=1) INFO 08-10 22:26:06 [api_utils.py:273] non-default args: {args!r}"
    scrubbed = scrub_text(line)
    assert "S3CR3T" not in scrubbed, scrubbed
    assert f"'{key}': " in scrubbed and MASK in scrubbed


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(PLAIN_KEYS, st.recursive(PLAIN, lambda i: st.lists(i, max_size=3), max_leaves=6),
                       max_size=5))
def test_nothing_secret_is_left_alone(args: dict) -> None:
    assert scrub_value(args) == json.loads(json.dumps(args))
    line = f"non-default args: {args!r}"
    assert scrub_text(line) == line


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["https", "http", "redis", "postgresql+psycopg", "git+ssh"]),
       st.text("abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=0, max_size=10), SECRETS,
       st.sampled_from(["registry.example", "10.0.0.2:6379", "[::1]:5432"]))
def test_url_passwords_are_masked(scheme: str, user: str, password: str, host: str) -> None:
    text = f"pulling {scheme}://{user}:{password}@{host}/path failed"
    assert scrub_text(text) == f"pulling {scheme}://{user}:{MASK}@{host}/path failed"


def test_the_vllm_shape_examples() -> None:
    line = ("non-default args: {'model_tag': 'google/gemma-4-E2B-it', 'api_key': ['sk-xyz'], "
            "'hf_token': ('hf_abc', 'hf_def'), 'additional_config': {'auth': [['a'], ['b']]}, 'max_model_len': 4096}")
    assert scrub_text(line) == ("non-default args: {'model_tag': 'google/gemma-4-E2B-it', 'api_key': ['***'], "
                                "'hf_token': ('***'), 'additional_config': {'auth': ['***']}, 'max_model_len': 4096}")
    assert scrub_value({"api_key": ["sk-xyz"], "nested": [{"password": ("a", "b")}, ["--api-key", "k"]]}) == \
        {"api_key": MASK, "nested": [{"password": MASK}, ["--api-key", MASK]]}


NAME_WORDS = st.one_of(
    st.sampled_from(["api", "TOKEN", "tokens", "key", "Keys", "monkey", "Secret", "passwd", "PWD", "paßword",
                     "credential", "Credentials", "authz", "AUTH", "tokenizer", "max", "num", "hf", "x1"]),
    st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=1, max_size=6))


@settings(max_examples=400, deadline=None)
@given(st.lists(NAME_WORDS, min_size=1, max_size=4), st.lists(st.sampled_from("_-."), min_size=3, max_size=3),
       st.sampled_from(["{n}={v}", "--{n} {v}", "--{n}={v}", "'{n}': '{v}'", "{n}: {v}"]))
@example(["max", "TOKEN", "x1"], ["_", "_", "_"], "{n}={v}")
@example(["db", "paßword"], ["_", "_", "_"], "--{n} {v}")
@example(["monkey"], ["_", "_", "_"], "'{n}': '{v}'")
def test_every_secret_name_passes_the_first_cheap_test(words: list[str], seps: list[str], form: str) -> None:
    """The cheap test in front of the regexes lets through every name ``is_secret_name`` calls
    secret (and a plain name's value is left alone)."""
    name = words[0] + "".join(sep + word for sep, word in zip(seps, words[1:]))
    assume(name[0].isalpha())          # the name patterns start at a letter (``0_TOKEN`` is no name)
    # a token shape is masked as one, name and all
    assume(not any(shape in name.lower() for shape in ("hf_", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_")))
    line = "INFO 12-01 10:00:00 [x.py:1] " + form.format(n=name, v="S3CR3Tvalue")
    if is_secret_name(name):
        assert "S3CR3T" not in scrub_text(line), (name, scrub_text(line))
    else:
        assert "S3CR3T" in scrub_text(line)


def test_metrics_lines_skip_the_scrubbing_regexes() -> None:
    """vLLM's periodic metrics line ("tokens/s", "KV cache") holds no secret-looking word."""
    line = ("(APIServer pid=1) INFO 09-30 03:50:01 [loggers.py:123] Engine 000: Avg prompt throughput: 12.0 "
            "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache "
            "usage: 0.0%, Prefix cache hit rate: 0.0%")
    assert not may_hold_secret(line)
    assert may_hold_secret(line.replace("tokens/s", "token=x"))


_PREFILTER_TEXT = st.lists(st.one_of(
    st.sampled_from(["ya29.", "YA29.", "ya00.", "key", "KEY1", "token", "Tokens/s", "hf_", "sk-", "://", "paß",
                     "ß", "word", "Bearer ", "AUTH", "cred", "ghp_", "aiza", " ", "0", "7", "=", "\udc80", "é"]),
    st.text("abcKEYTOKN0123456789_-.: ", max_size=6)), max_size=12).map("".join)


@settings(max_examples=600, deadline=None)
@given(st.lists(_PREFILTER_TEXT, min_size=1, max_size=6))
def test_the_cached_prefilter_answers_as_the_test_itself(texts: list[str]) -> None:
    """The prefilter's cache (keyed by the text with its digits read as 0) never changes a verdict:
    texts that differ only in their digits (``ya29.`` / ``ya00.``, ``KEY1`` / ``KEY0``) are answered
    each as the uncached test answers it, in any order."""
    from remote import secrets

    for text in texts + [t.translate(str.maketrans("0123456789", "2929292929")) for t in texts] + texts:
        assert may_hold_secret(text) == secrets._may_hold_secret(text), text


def test_a_cached_verdict_does_not_hide_a_google_token() -> None:
    """``ya00.`` caches "nothing here" for its shape; ``ya29.`` of the same shape is still caught."""
    assert not may_hold_secret("INFO 12-01 10:00:00 [x.py:1] id ya00.abcdef")
    assert may_hold_secret("INFO 12-01 10:00:00 [x.py:1] id ya29.abcdef")
    assert "abcdef" not in scrub_text("INFO 12-01 10:00:00 [x.py:1] id ya29.abcdef")
