"""fastpath.argv against Python's own argparse: the engines' parsers are argparse parsers, so the
degree reading must be argparse's reading of the same flag table.

The oracle is an ``argparse.ArgumentParser(allow_abbrev=True, add_help=False)`` holding each engine's
degree/mode/wiring table (aliases included), read with ``parse_known_args`` so that unknown flags and
positionals pass, as the reader lets them.  Deliberate differences, each neutralised here:

1. Ambiguous abbreviations: argparse stops with "ambiguous option"; the reader lets them pass
   unrecognised (§4.4).  The oracle catches that one error per token and treats the token as an
   unknown option — which is also how it classifies it as flag-looking.
2. Bad values: argparse stops at the first missing or unconvertible value; the reader reports every
   bad degree.  The oracle's actions take ``nargs='?'`` (same consumption as ``nargs=None``, but a
   missing value is recorded instead of raised) and keep every raw occurrence; ``int()`` — the
   ``type=int`` argparse would apply — runs afterwards on each occurrence.  A missing or non-integer
   value at any occurrence is an error (the engine's parser would stop there); the bounds (>= 1, or
   >= 0 for vLLM's ``--data-parallel-size-local``; int64) are the engines' post-parse validation, so
   they apply to the last occurrence only.
3. vLLM's ``FlexibleArgumentParser`` rewrites ``_`` to ``-`` in long names before argparse sees them;
   the oracle feeds argparse the argv rewritten the same way.  A dotted member (``--flag.key=v``)
   becomes a JSON document for ``--flag`` in vLLM (appended at the end of the line); the oracle puts
   that document in place, which is never an integer, so a dotted degree is an error on both sides.
   vLLM also moves the document to the end of the line and lets a ``=``-less dotted member take the
   next entry as its value whatever that entry is; the reader reads the member in place, as §4.2
   says, and so does the oracle.  For a degree the outcome is an error either way.
4. Modes and wiring flags given ``=value``: argparse's ``store_true`` stops with "ignored explicit
   argument" (or, for single-dash ``-ep=n2``, chains into ``-n 2``); the reader records the flag as
   seen and reports nothing, since only degrees produce errors.  The oracle's ``nargs='?'`` records
   them the same way.  Which value tokens a mode or wiring flag consumes never matters: a consumable
   token is never itself a flag.
"""

from __future__ import annotations

import argparse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api import engines
from fastpath.pure import bundle

# The reader: token recognition (fastpath.argv) and the degree tables (fastpath.degrees).
READER = ("argv", "degrees")
compiled = bundle(READER)
interpreted = bundle(READER, interpreted=True)
INT64_MAX = 2**63 - 1
MISSING = object()
DOTTED = '{"dotted":"member"}'  # what vLLM makes of a dotted member: a JSON document, never an int


class _Ambiguous(Exception):
    pass


class _Record(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        namespace.events.append((self.dest, values))


class Oracle(argparse.ArgumentParser):
    """argparse with the engine's table; ambiguous abbreviations pass as unknown options."""

    def __init__(self, grammar: engines.EngineGrammar) -> None:
        super().__init__(prog=grammar.engine, add_help=False, allow_abbrev=True)
        self.grammar = grammar
        for index, flag in enumerate(grammar.flags):
            self.add_argument(*flag.spellings, dest=f"f{index}", action=_Record, nargs="?", const=MISSING)

    def error(self, message):  # Python 3.11 reports ambiguity through error()
        raise _Ambiguous(message)

    def _parse_optional(self, arg_string):
        try:
            return super()._parse_optional(arg_string)
        except (_Ambiguous, argparse.ArgumentError) as exc:
            if "ambiguous option" not in str(exc):
                raise
            unknown = super()._parse_optional("--zz-oracle-unknown-option")
            return (None, arg_string, *unknown[2:])

    def read(self, argv: list[str]) -> dict:
        if self.grammar.rewrites_names:
            argv = [vllm_rewrite(tok) for tok in argv]
        namespace = argparse.Namespace(events=[])
        self.parse_known_args(argv, namespace=namespace)
        occurrences: dict[int, list] = {}
        for dest, value in namespace.events:
            occurrences.setdefault(int(dest[1:]), []).append(value)
        out = {"declared": set(), "modes": set(), "wiring": set(), "errors": set(), "values": {}}
        for index, values in occurrences.items():
            flag = self.grammar.flags[index]
            if flag.kind == engines.FLAG_MODE:
                out["modes"].add(flag.canonical)
            elif flag.kind == engines.FLAG_WIRING:
                out["wiring"].add(flag.canonical)
            elif flag.kind == engines.FLAG_DEGREE:
                out["declared"].add(flag.canonical)
                ints = []
                for value in values:
                    try:
                        ints.append(MISSING if value is MISSING else int(value))
                    except ValueError:
                        ints.append(MISSING)
                if MISSING in ints or not flag.minimum <= ints[-1] <= INT64_MAX:
                    out["errors"].add(flag.canonical)
                else:
                    out["values"][flag.field] = ints[-1]
        return out


def vllm_rewrite(token: str) -> str:
    """What vLLM's FlexibleArgumentParser hands argparse for one entry (dotted members in place)."""
    if not token.startswith("--"):
        return token
    name, sep, value = token.partition("=")
    head, dot, _ = name.partition(".")
    head = "--" + head[2:].replace("_", "-")
    if dot:
        return f"{head}={DOTTED}"
    return head + sep + value


ORACLES = {engine: Oracle(grammar) for engine, grammar in engines.GRAMMARS.items()}


def our_reading(module, engine: str, argv: list[str]) -> dict:
    degrees = module.parse_degrees(engine, argv)
    errors = {flag for flag, _ in degrees.errors}
    grammar = engines.GRAMMARS[engine]
    values = {
        flag.field: degrees.get(flag.field)
        for flag in grammar.flags
        if flag.kind == engines.FLAG_DEGREE
        and flag.canonical in degrees.declared
        and flag.canonical not in errors
    }
    return {
        "declared": set(degrees.declared),
        "modes": set(degrees.modes),
        "wiring": set(degrees.wiring),
        "errors": errors,
        "values": values,
    }


def agree(engine: str, argv: list[str]) -> None:
    expected = ORACLES[engine].read(argv)
    for module in (compiled, interpreted):
        assert our_reading(module, engine, argv) == expected, (module.__name__, engine, argv)


# --- Examples first: the spec's cases, each checked against argparse -----------------------------

EXAMPLES = [
    (engines.ENGINE_VLLM, ["-tp", "2"]),
    (engines.ENGINE_VLLM, ["-tp", "two"]),
    (engines.ENGINE_VLLM, ["-tp", "-1"]),
    (engines.ENGINE_VLLM, ["-tp"]),
    (engines.ENGINE_VLLM, ["-tp=2", "-tp2", "-t", "4", "-t=5"]),
    (engines.ENGINE_VLLM, ["-pc", "2", "-e", "-dc", "3", "-d", "4", "-n2", "-r0", "-n=3"]),
    (engines.ENGINE_VLLM, ["--data-parallel", "3", "--data-parallel-size-l", "2"]),
    (engines.ENGINE_VLLM, ["--tensor_parallel_size", "4", "--data_parallel_size_local=0"]),
    (engines.ENGINE_VLLM, ["--tensor-parallel-size.x=3", "-pp", "2"]),
    (engines.ENGINE_VLLM, ["-tp", "--", "2"]),
    (engines.ENGINE_VLLM, ["-tp", "2", "--", "-pp", "3"]),
    (engines.ENGINE_VLLM, ["-tp", "-1.5", "-pp", "-.5", "-pcp", "-1\n"]),
    (engines.ENGINE_VLLM, ["-tp", "1_0", "-pp", " 3 ", "-dp", "_3", "-dcp", "3_"]),
    (engines.ENGINE_VLLM, ["-tp", "99999999999999999999", "-pp", "9223372036854775807"]),
    (engines.ENGINE_VLLM, ["-ep=1", "--enable-expert-parallel=true", "-dph", "x"]),
    (engines.ENGINE_VLLM, ["-tp", "-x y", "-pp", "--a b", "-dp", "-tp 3"]),
    (engines.ENGINE_SGLANG, ["--tp", "2", "--dp", "4", "--ep", "8", "--e", "--d", "1"]),
    (engines.ENGINE_SGLANG, ["--tp_size", "2", "--tp-size.x=3", "--enable-dp-attention", "--nnodes", "2"]),
    (engines.ENGINE_SGLANG, ["--tp-size=", "--pp-size", "--enable-prefill-cp"]),
]


@pytest.mark.parametrize(("engine", "argv"), EXAMPLES)
def test_examples_agree_with_argparse(engine, argv) -> None:
    agree(engine, argv)


# --- Then generated command lines ------------------------------------------------------------------


def spellings(engine: str) -> list[str]:
    return sorted({s for f in engines.GRAMMARS[engine].flags for s in f.spellings})


@st.composite
def flag_token(draw, engine: str) -> str:
    spelling = draw(st.sampled_from(spellings(engine)))
    how = draw(st.integers(0, 6))
    if how == 1:  # an abbreviation, perhaps ambiguous
        spelling = spelling[: draw(st.integers(2, len(spelling)))]
    elif how == 2:  # vLLM's underscores
        spelling = spelling[:2] + spelling[2:].replace("-", "_")
    elif how == 3 and spelling.startswith("--"):  # a dotted member
        spelling += ".key"
    elif how == 4 and not spelling.startswith("--"):  # a glued value
        spelling += draw(st.sampled_from(["2", "0", "x"]))
    if draw(st.integers(0, 3)) == 0:
        spelling += "=" + draw(value)
    return spelling


value = st.one_of(
    st.sampled_from(["1", "2", "4", "8", "0", "-1", "-3", " 4 ", "1_0", "_3", "3_", "+2", "1.5", "-1.5"]),
    st.sampled_from(["-.5", "٣", "-1\n", "99999999999999999999", "9223372036854775807", "", "two", "x y"]),
    st.sampled_from(["-0", "-0 ", "-2 ", " -0", "-0\n", "-00", "-4_0", "-٣"]),
    st.integers(-(2**66), 2**66).map(str),
)
noise = st.sampled_from(
    ["serve", "model", "--max-model-len", "--foo=1", "-x", "-", "--", "-x y", "--a b", "-tp 2", "--", "-1"]
)


@st.composite
def command_line(draw, engine: str) -> list[str]:
    # Mostly flag-value pairs, so that repeats (last wins) and value classification both get exercised.
    groups = draw(
        st.lists(
            st.one_of(
                st.tuples(flag_token(engine), value),
                st.tuples(flag_token(engine)),
                st.tuples(st.one_of(value, noise)),
            ),
            max_size=12,
        )
    )
    return [tok for group in groups for tok in group]


@settings(deadline=None, max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_vllm_agrees_with_argparse(data) -> None:
    agree(engines.ENGINE_VLLM, data.draw(command_line(engines.ENGINE_VLLM)))


@settings(deadline=None, max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sglang_agrees_with_argparse(data) -> None:
    agree(engines.ENGINE_SGLANG, data.draw(command_line(engines.ENGINE_SGLANG)))


@settings(deadline=None, max_examples=300)
@given(argv=st.lists(st.text(alphabet="-_=. tpdnrcel0123456789x", max_size=8), max_size=12))
def test_garbage_agrees_with_argparse(argv) -> None:
    agree(engines.ENGINE_VLLM, argv)
    agree(engines.ENGINE_SGLANG, argv)
