"""fastpath.argv and fastpath.degrees property tests: the compiled extension answers exactly as its interpreted source,
on generated command lines including garbage, and integers read exactly as Python's int()."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api import engines
from fastpath.pure import bundle, is_compiled, modules

# The reader: token recognition (fastpath.argv) and the degree tables (fastpath.degrees).
READER = ("argv", "degrees")
compiled = bundle(READER)
interpreted = bundle(READER, interpreted=True)

ENGINES = [engines.ENGINE_VLLM, engines.ENGINE_SGLANG, "TensorRT-LLM"]
SPELLINGS = sorted(
    {s for g in engines.GRAMMARS.values() for f in g.flags for s in f.spellings}
    | {k for e in engines.ENGINES for k in engines.owned_args(e, kv_cache_dtype_owned=True)}
    | {k for e in engines.ENGINES for k in engines.ARTIFACT_OWNED_ARGS[e]}
    | {engines.PORT_FLAG, engines.HOST_FLAG}
)
CANDIDATE_SETS = [
    engines.owned_args(engines.ENGINE_VLLM),
    engines.owned_args(engines.ENGINE_SGLANG, kv_cache_dtype_owned=True),
    engines.ARTIFACT_OWNED_ARGS[engines.ENGINE_VLLM],
    frozenset({"--port"}),
    frozenset({"-tp", "-n", "-pcp", "--tensor-parallel-size"}),
]


def test_compiled_extension_is_loaded() -> None:
    for module in modules(READER):
        assert is_compiled(module), (
            f"{module.__name__} was imported from {module.__file__}, not a compiled extension: build it "
            "with `pip install -e .` or `python setup.py build_ext --inplace` before running the tests"
        )
    assert not any(is_compiled(module) for module in modules(READER, interpreted=True))


@st.composite
def spelling_variant(draw) -> str:
    """A flag the way users (mis)spell it: prefixes, underscores, dotted members, glued values."""
    spelling = draw(st.sampled_from(SPELLINGS))
    how = draw(st.integers(0, 7))
    if how == 1:
        spelling = spelling[: draw(st.integers(1, len(spelling)))]
    elif how == 2:
        spelling = spelling[:2] + spelling[2:].replace("-", "_")
    elif how == 3:
        spelling += "." + draw(st.sampled_from(["kv_role", "x", "", "a.b"]))
    elif how == 4:
        spelling += draw(st.sampled_from(["2", "0", "x", "-1"]))
    if draw(st.booleans()):
        spelling += "=" + draw(value_text)
    return spelling


value_text = st.one_of(
    st.sampled_from(["1", "2", "8", "0", "-1", "-2", " 4 ", "1_0", "_3", "3_", "+2", "1.5", "-1.5", "-.5"]),
    st.sampled_from(["٣", "９", "\u20034", "-1\n", "99999999999999999999", "9223372036854775807", "", "two"]),
    st.integers(-(2**70), 2**70).map(str),
    st.text(alphabet=" \t\n_+-0123456789.", max_size=8),
)

garbage = st.one_of(
    st.text(max_size=12),
    st.text(alphabet="-_=. tpdnrce0123456789", max_size=10),
    st.sampled_from(["--", "-", "", "-x y", "--a b", "--=x", "-=", "---tp", "--enable-", "-d", "-dc"]),
)

token = st.one_of(spelling_variant(), value_text, garbage)
argv_lists = st.lists(token, max_size=24)


def same(a, b) -> None:
    assert a == b, (a, b)


@settings(deadline=None, max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(argv=argv_lists, engine=st.sampled_from(ENGINES), env=st.one_of(st.none(), value_text))
def test_parse_degrees_compiled_equals_interpreted(argv, engine, env) -> None:
    env_map = None if env is None else {"VLLM_DP_SIZE": env}
    a = compiled.parse_degrees(engine, argv, env_map)
    b = interpreted.parse_degrees(engine, argv, env_map)
    same(a.to_dict(), b.to_dict())
    same(compiled.width(engine, a), interpreted.width(engine, b))


@settings(deadline=None, max_examples=400)
@given(argv=argv_lists, engine=st.sampled_from(ENGINES), which=st.integers(0, len(CANDIDATE_SETS) - 1))
def test_owned_and_port_compiled_equal_interpreted(argv, engine, which) -> None:
    owned = CANDIDATE_SETS[which]
    same(compiled.find_owned_args(engine, argv, owned), interpreted.find_owned_args(engine, argv, owned))
    same(compiled.read_port(engine, argv), interpreted.read_port(engine, argv))
    for tok in argv:
        same(compiled.resolve_flag(engine, tok, owned), interpreted.resolve_flag(engine, tok, owned))


@settings(deadline=None, max_examples=100)
@given(argv=st.lists(st.one_of(token, st.none(), st.integers(), st.binary(max_size=3)), max_size=10))
def test_non_string_entries_are_positionals(argv) -> None:
    for engine in ENGINES:
        same(
            compiled.parse_degrees(engine, argv).to_dict(), interpreted.parse_degrees(engine, argv).to_dict()
        )
        owned = CANDIDATE_SETS[0]
        same(compiled.find_owned_args(engine, argv, owned), interpreted.find_owned_args(engine, argv, owned))
        same(compiled.read_port(engine, argv), interpreted.read_port(engine, argv))


def python_reading(text: str):
    """What the spec asks of a degree value: int() semantics, bounded to int64 and >= 1."""
    try:
        value = int(text)
    except ValueError:
        return "error"
    if not 1 <= value <= 2**63 - 1:
        return "error"
    return value


@settings(deadline=None, max_examples=500)
@given(
    text=st.one_of(value_text, st.text(max_size=10), st.from_regex(r"\s*[+-]?\d+(_\d+)*\s*", fullmatch=True))
)
def test_degree_values_read_as_python_int(text) -> None:
    expected = python_reading(text)
    for module in (compiled, interpreted):
        degrees = module.parse_degrees(engines.ENGINE_VLLM, ["--tensor-parallel-size=" + text])
        got = degrees.tp if degrees.ok else "error"
        assert got == expected, (module.__name__, text, degrees.errors)
