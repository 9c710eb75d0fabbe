"""The degree tables of the engine command-line reader (model-deployment.md §4.4, §4.5): each
engine's degree, mode and wiring flags compiled into a trie, a role's stream read into its
:class:`Degrees` with argparse's semantics, and the accelerator width one member needs.

Token recognition is ``fastpath.argv``'s (shared through ``argv.pxd``).  Compiled by Cython from
this source; it runs interpreted too (``fastpath.pure.load("degrees")``) and answers identically.
"""

from array import array
from collections.abc import Mapping

import cython

from api.engines import (
    DEGREE_FIELDS,
    ENGINE_SGLANG,
    ENGINE_VLLM,
    FLAG_DEGREE,
    FLAG_MODE,
    FLAG_OTHER,
    FLAG_WIRING,
    GRAMMARS,
    EngineGrammar,
)
from fastpath.argv import OUT_OF_RANGE, Trie, check_spelling

if not cython.compiled:  # compiled, these come from argv.pxd
    from fastpath.argv import POSITIONAL, RESOLVED, int_value, spelled, value_class, walk

__all__ = ["INT64_MAX", "Degrees", "parse_degrees", "width"]

INT64_MAX = 9223372036854775807

# Entry kinds of an engine grammar.
_K_DEGREE = cython.declare(cython.int, 1)
_K_MODE = cython.declare(cython.int, 2)
_K_WIRING = cython.declare(cython.int, 3)
_KIND_CODES = {FLAG_DEGREE: 1, FLAG_MODE: 2, FLAG_WIRING: 3, FLAG_OTHER: 4}

_NSLOTS = cython.declare(cython.int, 10)
assert len(DEGREE_FIELDS) == 10  # the Degrees fields, in _set_slot's order


# --- Tables ------------------------------------------------------------------------------------------


@cython.cclass
class _Grammar:
    """One engine's degree/mode/wiring table, compiled."""

    engine: str
    trie: Trie
    rewrite: cython.bint
    kinds: cython.int[:]
    slots: cython.int[:]
    minima: cython.longlong[:]
    canonical: tuple
    env_name: object
    env_slot: cython.int
    dp_entry: cython.int

    def __init__(self, grammar: EngineGrammar):
        if len(grammar.flags) > 62:
            raise ValueError("an engine grammar holds at most 62 flags")
        spellings = []
        entries = []
        for index, flag in enumerate(grammar.flags):
            for spelling in flag.spellings:
                if spelling in spellings:
                    raise ValueError(f"{grammar.engine}: {spelling} spelled twice")
                spellings.append(check_spelling(spelling))
                entries.append(index)
        self.engine = grammar.engine
        self.trie = Trie(spellings, entries, [flag.canonical for flag in grammar.flags])
        self.rewrite = grammar.rewrites_names
        self.kinds = array("i", [_KIND_CODES[flag.kind] for flag in grammar.flags])
        self.slots = array(
            "i", [DEGREE_FIELDS.index(flag.field) if flag.field else -1 for flag in grammar.flags]
        )
        self.minima = array("q", [flag.minimum for flag in grammar.flags])
        self.canonical = tuple(flag.canonical for flag in grammar.flags)
        self.env_name = grammar.degree_env
        self.env_slot = DEGREE_FIELDS.index(grammar.degree_env_field) if grammar.degree_env_field else -1
        self.dp_entry = -1
        if self.env_slot >= 0:
            for index, slot in enumerate(self.slots):
                if slot == self.env_slot:
                    self.dp_entry = index


_GRAMMARS = {name: _Grammar(grammar) for name, grammar in GRAMMARS.items()}
_GRAMMARS = {name: _Grammar(grammar) for name, grammar in GRAMMARS.items()}


# --- Degrees -----------------------------------------------------------------------------------------


@cython.cclass
class Degrees:
    """One parse of a role's stream: every degree, the modes and wiring flags seen, the errors.

    Degrees default to 1, except ``dpl`` (vLLM ``--data-parallel-size-local``) whose 0 means unset.
    ``modes``, ``wiring`` and ``declared`` (degree flags present) hold canonical spellings in table
    order.  ``errors`` is a list of ``(flag, message)``, ``flag`` canonical (or ``VLLM_DP_SIZE``), in
    the order of the entries that caused them.  ``dp_from_env`` says the DP degree came from
    ``VLLM_DP_SIZE``.
    """

    engine = cython.declare(str, visibility="readonly")
    tp = cython.declare(cython.longlong, visibility="readonly")
    pp = cython.declare(cython.longlong, visibility="readonly")
    dp = cython.declare(cython.longlong, visibility="readonly")
    dpl = cython.declare(cython.longlong, visibility="readonly")
    pcp = cython.declare(cython.longlong, visibility="readonly")
    dcp = cython.declare(cython.longlong, visibility="readonly")
    ep = cython.declare(cython.longlong, visibility="readonly")
    attn_cp = cython.declare(cython.longlong, visibility="readonly")
    moe_dp = cython.declare(cython.longlong, visibility="readonly")
    dwdp = cython.declare(cython.longlong, visibility="readonly")
    modes = cython.declare(tuple, visibility="readonly")
    wiring = cython.declare(tuple, visibility="readonly")
    declared = cython.declare(tuple, visibility="readonly")
    errors = cython.declare(list, visibility="readonly")
    dp_from_env = cython.declare(cython.bint, visibility="readonly")

    def __init__(
        self,
        engine: str = "",
        tp: int = 1,
        pp: int = 1,
        dp: int = 1,
        dpl: int = 0,
        pcp: int = 1,
        dcp: int = 1,
        ep: int = 1,
        attn_cp: int = 1,
        moe_dp: int = 1,
        dwdp: int = 1,
        modes: tuple = (),
        wiring: tuple = (),
        declared: tuple = (),
        errors=None,
        dp_from_env: bool = False,
    ):
        self.engine = engine
        self.tp = tp
        self.pp = pp
        self.dp = dp
        self.dpl = dpl
        self.pcp = pcp
        self.dcp = dcp
        self.ep = ep
        self.attn_cp = attn_cp
        self.moe_dp = moe_dp
        self.dwdp = dwdp
        self.modes = tuple(modes)
        self.wiring = tuple(wiring)
        self.declared = tuple(declared)
        self.errors = [] if errors is None else list(errors)
        self.dp_from_env = dp_from_env

    @property
    def ok(self) -> bool:
        """True when the stream was readable (no degree errors)."""
        return not self.errors

    def get(self, field: str) -> int:
        """A degree by its field name (``api.engines.DEGREE_FIELDS``)."""
        if field not in DEGREE_FIELDS:
            raise KeyError(field)
        return getattr(self, field)

    def to_dict(self) -> dict:
        out = {"engine": self.engine}
        for field in DEGREE_FIELDS:
            out[field] = getattr(self, field)
        out["modes"] = self.modes
        out["wiring"] = self.wiring
        out["declared"] = self.declared
        out["errors"] = list(self.errors)
        out["dp_from_env"] = bool(self.dp_from_env)
        return out

    def __eq__(self, other):
        if not isinstance(other, Degrees):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __repr__(self):
        parts = [f"{k}={v!r}" for k, v in self.to_dict().items() if k != "engine"]
        return f"Degrees({self.engine!r}, {', '.join(parts)})"


@cython.cfunc
@cython.exceptval(check=False)
def _set_slot(d: Degrees, slot: cython.int, v: cython.longlong) -> cython.void:
    if slot == 0:
        d.tp = v
    elif slot == 1:
        d.pp = v
    elif slot == 2:
        d.dp = v
    elif slot == 3:
        d.dpl = v
    elif slot == 4:
        d.pcp = v
    elif slot == 5:
        d.dcp = v
    elif slot == 6:
        d.ep = v
    elif slot == 7:
        d.attn_cp = v
    elif slot == 8:
        d.moe_dp = v
    elif slot == 9:
        d.dwdp = v


def _label(spelled: str, canonical: str) -> str:
    return spelled if spelled == canonical else f"{spelled} ({canonical})"


def _missing_message(label: str, nxt: object, klass: int) -> str:
    if nxt is None:
        why = "it is the last entry"
    elif klass == 4:
        why = "the next entry '--' ends the options"
    else:
        why = f"the next entry {nxt!r} is read as a flag, not a value"
    return f"{label} expects an integer value, but {why}"


def _bound_message(label: str, value: object, parsed: object, minimum: int) -> str:
    if parsed is OUT_OF_RANGE:
        return f"{label} value {value!r} is out of range (beyond a 64-bit integer)"
    return f"{label} value {parsed} is less than {minimum}"


def _env_value(env, name: object):
    """The literal value of ``name`` in a role's env (a mapping, or a list of {name, value})."""
    if env is None:
        return None
    if isinstance(env, Mapping):
        return env.get(name)
    found = None
    for item in env:
        if isinstance(item, Mapping):
            if item.get("name") == name:
                value = item.get("value")
                found = ("" if value is None else value) if item.get("valueFrom") is None else None
        elif getattr(item, "name", None) == name:
            value = getattr(item, "value", None)
            found = "" if value is None else value
    return found


@cython.final
@cython.cclass
class _Reading:
    """What one parse has seen so far: resolved entries, slots whose last value is out of bounds
    (with their messages), and sticky errors ``(entry index, flag, message)``."""

    seen = cython.declare(cython.ulonglong)
    bad = cython.declare(cython.ulonglong)
    pending = cython.declare(dict)  # slot -> (index, flag, message) for `bad` slots
    errors = cython.declare(list)

    def __init__(self) -> None:
        self.seen = 0
        self.bad = 0
        self.pending = {}
        self.errors = []


@cython.cfunc
def _fresh(engine: str) -> Degrees:
    """Degrees at their defaults: 1, except ``dpl`` (0 means unset)."""
    d: Degrees = Degrees.__new__(Degrees)
    d.engine = engine
    d.tp = 1
    d.pp = 1
    d.dp = 1
    d.dpl = 0
    d.pcp = 1
    d.dcp = 1
    d.ep = 1
    d.attn_cp = 1
    d.moe_dp = 1
    d.dwdp = 1
    d.dp_from_env = False
    d.modes = ()
    d.wiring = ()
    d.declared = ()
    d.errors = []
    return d


@cython.boundscheck(False)
@cython.wraparound(False)
def parse_degrees(engine: str, argv, env=None) -> Degrees:
    """Read the degrees, modes and wiring flags of a role's stream with argparse's semantics (§4.4).

    Last occurrence wins.  Errors, and only these: a degree flag whose value is missing or not an
    integer (at any occurrence: the engine's parser stops there), or whose effective (last) value is
    out of int64 range or below its minimum; on vLLM a dotted degree flag (its value becomes a JSON
    document); a malformed ``VLLM_DP_SIZE`` that is effective (no DP flag on the line).
    ``env`` is the role's env (mapping or list of ``{name, value}``); only vLLM reads it.
    """
    d: Degrees = _fresh(engine)
    found = _GRAMMARS.get(engine)
    if found is None:
        return d
    g: _Grammar = found
    reading: _Reading = _Reading()
    seq: list = argv if type(argv) is list else ([] if argv is None else list(argv))
    n: cython.Py_ssize_t = len(seq)
    i: cython.Py_ssize_t = 0
    tn: cython.Py_ssize_t
    r: cython.longlong
    e: cython.int
    while i < n:
        tok = seq[i]
        if isinstance(tok, str):
            t: str = cython.cast(str, tok)
            tn = len(t)
            if tn >= 2 and t[0] == "-":
                if tn == 2 and t[1] == "-":
                    break
                r = walk(t, tn, g.trie, g.rewrite, False)
                if (r & 3) == RESOLVED:
                    e = cython.cast(cython.int, ((r >> 3) & 0x1FFFFFFF) - 1)
                    reading.seen |= cython.cast(cython.ulonglong, 1) << e
                    if g.kinds[e] == _K_DEGREE:
                        i = _read_degree(d, g, reading, seq, i, t, r)
        i += 1
    if g.dp_entry >= 0 and not (reading.seen & (cython.cast(cython.ulonglong, 1) << g.dp_entry)):
        _env_degree(d, g, reading, env, n)
    _finish(d, g, reading)
    return d


@cython.cfunc
@cython.exceptval(-1, check=True)
def _read_degree(
    d: Degrees, g: _Grammar, reading: _Reading, seq: list, i: cython.Py_ssize_t, t: str, r: cython.longlong
) -> cython.Py_ssize_t:
    """The degree flag at ``seq[i]`` (``r``: its walk) and its value; returns the index of the last
    entry it consumed (its value's, when the value is the next entry)."""
    n: cython.Py_ssize_t = len(seq)
    e: cython.int = cython.cast(cython.int, ((r >> 3) & 0x1FFFFFFF) - 1)
    slot: cython.int = g.slots[e]
    xpos: cython.Py_ssize_t = cython.cast(cython.Py_ssize_t, (r >> 32) - 1)
    at: cython.Py_ssize_t = i
    bit: cython.ulonglong = cython.cast(cython.ulonglong, 1) << slot
    v: cython.longlong
    value = None
    if xpos >= 0:
        value = t[xpos:]
    elif i + 1 < n and value_class(seq[i + 1], g.trie, g.rewrite) == POSITIONAL:
        i += 1
        value = seq[i]
    if value is None or (r & 4):
        label = _label(spelled(t, xpos), g.canonical[e])
        if r & 4:
            message = f"{label}: vLLM reads a dotted member as a JSON document, which is not an integer"
        else:
            nxt = seq[i + 1] if i + 1 < n else None
            message = _missing_message(label, nxt, value_class(nxt, g.trie, g.rewrite) if i + 1 < n else 0)
        reading.errors.append((at, g.canonical[e], message))
        return i
    parsed = int_value(value)
    if parsed is None:
        label = _label(spelled(t, xpos), g.canonical[e])
        reading.errors.append((at, g.canonical[e], f"{label} value {value!r} is not an integer"))
        return i
    if parsed is not OUT_OF_RANGE:
        v = parsed
        _set_slot(d, slot, v)
        if v >= g.minima[e]:
            reading.bad &= ~bit
            return i
    reading.bad |= bit
    label = _label(spelled(t, xpos), g.canonical[e])
    reading.pending[slot] = (at, g.canonical[e], _bound_message(label, value, parsed, g.minima[e]))
    return i


@cython.cfunc
def _env_degree(d: Degrees, g: _Grammar, reading: _Reading, env: object, n: cython.Py_ssize_t) -> cython.void:
    """vLLM's ``VLLM_DP_SIZE``, read when no DP flag is on the line."""
    raw = _env_value(env, g.env_name)
    if raw is None:
        return
    parsed = int_value(raw)
    if parsed is None:
        reading.errors.append((n, g.env_name, f"env {g.env_name} value {raw!r} is not an integer"))
    elif parsed is OUT_OF_RANGE or parsed < 1:
        reading.errors.append((n, g.env_name, _bound_message(f"env {g.env_name}", raw, parsed, 1)))
    else:
        _set_slot(d, g.env_slot, parsed)
        d.dp_from_env = True


@cython.cfunc
@cython.locals(slot=cython.int, e=cython.int)
def _finish(d: Degrees, g: _Grammar, reading: _Reading) -> cython.void:
    """The errors in entry order, and the modes, wiring and degree flags seen in table order."""
    errors: list = reading.errors
    for slot in range(_NSLOTS):
        if reading.bad & (cython.cast(cython.ulonglong, 1) << slot):
            errors.append(reading.pending[slot])
    if errors:
        errors.sort(key=_first)
        d.errors = [(flag, message) for _, flag, message in errors]
    if not reading.seen:
        return
    modes = []
    wiring = []
    declared = []
    for e in range(len(g.canonical)):
        if reading.seen & (cython.cast(cython.ulonglong, 1) << e):
            if g.kinds[e] == _K_MODE:
                modes.append(g.canonical[e])
            elif g.kinds[e] == _K_WIRING:
                wiring.append(g.canonical[e])
            elif g.kinds[e] == _K_DEGREE:
                declared.append(g.canonical[e])
    d.modes = tuple(modes)
    d.wiring = tuple(wiring)
    d.declared = tuple(declared)


def _first(item):
    return item[0]


# --- Width ------------------------------------------------------------------------------------------------


def width(engine: str, degrees: Degrees) -> tuple:
    """The accelerator width one member needs (§4.5): ``(R, factors)``.

    ``factors`` is a tuple of ``(canonical flag, value)`` for every factor above 1, in formula order.
    ``R`` is None when the product overflows int64 (callers say "more than C").  vLLM:
    ``TP×PP×PCP×(DPL if DPL>1 else DP if DPL==0 else 1)``; SGLang: ``TP×PP×DP``, narrowed to ``TP×PP``
    under ``--enable-dp-attention``, DWDP>1, MoE-DP>1 or attention-CP>1; other engines: 1.
    Callers skip the check when the parse has errors or wiring flags.
    """
    if engine == ENGINE_VLLM:
        if degrees.dpl > 1:
            dp_factor = ("--data-parallel-size-local", degrees.dpl)
        elif degrees.dpl == 0:
            dp_factor = ("--data-parallel-size", degrees.dp)
        else:
            dp_factor = ("--data-parallel-size-local", 1)
        terms = [
            ("--tensor-parallel-size", degrees.tp),
            ("--pipeline-parallel-size", degrees.pp),
            ("--prefill-context-parallel-size", degrees.pcp),
            dp_factor,
        ]
    elif engine == ENGINE_SGLANG:
        terms = [("--tp-size", degrees.tp), ("--pp-size", degrees.pp)]
        narrowed = (
            "--enable-dp-attention" in degrees.modes
            or degrees.dwdp > 1
            or degrees.moe_dp > 1
            or degrees.attn_cp > 1
        )
        if not narrowed:
            terms.append(("--dp-size", degrees.dp))
    else:
        return (1, ())
    product = 1
    for _, value in terms:
        product *= value
    factors = tuple(term for term in terms if term[1] > 1)
    if product > INT64_MAX or product < -INT64_MAX - 1:
        return (None, factors)
    return (product, factors)
