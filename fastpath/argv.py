"""The engine command-line reader (model-deployment.md §4), compiled by Cython from this source.

Every consumer of a role's argv calls into this module: the ModelDeployment webhook (owned args,
degrees, width, ``--port``), the renderer (degrees for transfer documents, ``--port``/``--host``
fill) and the Pod KV-cache injector (owned args in every spelling the engine parser accepts).

Recognition follows the engine's own parser, which is Python ``argparse`` (``allow_abbrev=True``):

* ``--flag value`` / ``--flag=value``; vLLM (``FlexibleArgumentParser``) first turns ``_`` into ``-``
  in a long flag's name before its first ``.`` and the reader drops the name from that ``.`` on
  (``--kv-transfer-config.kv_role=x`` is ``--kv-transfer-config``); SGLang does neither.
* exact spellings win; otherwise a unique prefix of a long spelling resolves; a prefix shared by
  several spellings is ambiguous and passes through unrecognised;
* single-dash spellings: ``-tp 2`` / ``-tp=2``; ``-tp2`` passes through; a two-character spelling
  takes its value concatenated (``-n2``, ``-r0``); a bare single-dash token may abbreviate a longer
  single-dash spelling (``-t`` → ``-tp``) but ``-t=2`` passes through;
* a token is *flag-looking* exactly when argparse would classify it as an option: it starts with
  ``-``, is not ``-`` alone, and is not a negative number (``-1``, ``-.5``) nor — unless it resolves —
  a token containing a space.  A flag-looking token is never consumed as a value; ``--`` ends options.

Tables are compiled at import into tries (flat ``int`` arrays) so that recognising a token is one
pass of C-level character comparisons, with no string slicing or hashing.  The module runs
interpreted too (``fastpath.pure.load("argv")``) and answers identically.
"""

import re
import unicodedata
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
    PORT_FLAG,
    EngineGrammar,
)

__all__ = [
    "INT64_MAX",
    "Degrees",
    "find_owned_args",
    "parse_degrees",
    "read_port",
    "resolve_flag",
    "stream",
    "width",
]

INT64_MAX = 9223372036854775807
_I64_MAX = cython.declare(cython.longlong, 9223372036854775807)

# Token classes returned by _walk (low two bits of the packed result).
_POSITIONAL = cython.declare(cython.int, 0)  # argparse 'A': a value / positional
_RESOLVED = cython.declare(cython.int, 1)  # a spelling of the table (entry and explicit value follow)
_AMBIGUOUS = cython.declare(cython.int, 2)  # an abbreviation of several spellings: passes through
_UNKNOWN = cython.declare(cython.int, 3)  # flag-looking, not in the table

# Entry kinds of an engine grammar.
_K_DEGREE = cython.declare(cython.int, 1)
_K_MODE = cython.declare(cython.int, 2)
_K_WIRING = cython.declare(cython.int, 3)
_KIND_CODES = {FLAG_DEGREE: 1, FLAG_MODE: 2, FLAG_WIRING: 3, FLAG_OTHER: 4}

_NSLOTS = cython.declare(cython.int, 10)
assert len(DEGREE_FIELDS) == 10  # the Degrees fields, in _set_slot's order

# argparse's own negative-number test; used only for tokens with non-ASCII characters (\d is Unicode).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")

_OUT_OF_RANGE = object()  # _int_value: syntactically an integer, beyond int64


# --- Tries -------------------------------------------------------------------------------------------


@cython.cclass
class _Trie:
    """Every prefix of every spelling, as flat arrays indexed by node.

    ``child[node * width + symbol]`` is the next node or -1; ``exact[node]`` the entry spelled exactly
    by the path to ``node`` or -1; ``unique[node]`` the entry when exactly one spelling has that
    prefix, -2 when several do.  ``symbol_of[code]`` maps an ASCII code to a symbol or -1.
    """

    child: cython.int[:]
    exact: cython.int[:]
    unique: cython.int[:]
    symbol_of: cython.int[:]
    width: cython.int
    names: tuple

    def __init__(self, spellings, entries, names):
        symbols = sorted({ch for spelling in spellings for ch in spelling} | {"-"})
        symbol_of = array("i", [-1] * 128)
        for k, ch in enumerate(symbols):
            symbol_of[ord(ch)] = k
        width = len(symbols)
        child = array("i", [-1] * width)
        exact = array("i", [-1])
        unique = array("i", [-1])
        count = [0]
        for spelling, entry in zip(spellings, entries, strict=True):
            node = 0
            for ch in spelling:
                slot = node * width + symbol_of[ord(ch)]
                nxt = child[slot]
                if nxt < 0:
                    nxt = len(exact)
                    child[slot] = nxt
                    child.extend([-1] * width)
                    exact.append(-1)
                    unique.append(-1)
                    count.append(0)
                node = nxt
                count[node] += 1
                unique[node] = entry if count[node] == 1 else -2
            exact[node] = entry
        self.child = child
        self.exact = exact
        self.unique = unique
        self.symbol_of = symbol_of
        self.width = width
        self.names = tuple(names)


def _check_spelling(spelling: object) -> str:
    if (
        not isinstance(spelling, str)
        or len(spelling) < 2
        or spelling[0] != "-"
        or spelling == "--"
        or not spelling.isascii()
        or any(ch in spelling for ch in "= \t\n")
    ):
        raise ValueError(f"not a flag spelling: {spelling!r}")
    return spelling


@cython.cclass
class _Grammar:
    """One engine's degree/mode/wiring table, compiled."""

    engine: str
    trie: _Trie
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
                spellings.append(_check_spelling(spelling))
                entries.append(index)
        self.engine = grammar.engine
        self.trie = _Trie(spellings, entries, [flag.canonical for flag in grammar.flags])
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
_REWRITES = {name: grammar.rewrites_names for name, grammar in GRAMMARS.items()}

_CANDIDATES: dict = {}


def _candidate_trie(candidates) -> _Trie:
    """The trie of a candidate set (owned keys, ``--port``…), built once per distinct set."""
    if isinstance(candidates, str):
        candidates = (candidates,)
    key = candidates if type(candidates) is frozenset else frozenset(candidates)
    found = _CANDIDATES.get(key)
    if found is not None:
        return found
    names = sorted(_check_spelling(spelling) for spelling in key)
    trie = _Trie(names, list(range(len(names))), names)
    if len(_CANDIDATES) >= 256:
        _CANDIDATES.clear()
    _CANDIDATES[key] = trie
    return trie


_PORT_TRIE = _candidate_trie(frozenset({PORT_FLAG}))


# --- Token recognition -------------------------------------------------------------------------------


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _pack(
    code: cython.int, entry: cython.int, xpos: cython.Py_ssize_t, dotted: cython.bint
) -> cython.longlong:
    return (
        cython.cast(cython.longlong, xpos + 1) * 4294967296
        + cython.cast(cython.longlong, entry + 1) * 8
        + dotted * 4
        + code
    )


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _negative_number(t: str, n: cython.Py_ssize_t, nonascii: cython.bint) -> cython.bint:
    """argparse's ``^-\\d+$|^-\\d*\\.\\d+$`` (``$`` also matches before a final newline)."""
    if nonascii:
        return _NEGATIVE_NUMBER.match(t) is not None
    end: cython.Py_ssize_t = n
    if t[n - 1] == "\n":
        end = n - 1
    j: cython.Py_ssize_t = 1
    while j < end and "0" <= t[j] <= "9":
        j += 1
    if j == end:
        return j > 1
    if t[j] != ".":
        return False
    k: cython.Py_ssize_t = j + 1
    while k < end and "0" <= t[k] <= "9":
        k += 1
    return k == end and k > j + 1


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.exceptval(-1, check=True)
def _walk(
    t: str, n: cython.Py_ssize_t, tr: _Trie, rewrite: cython.bint, classify: cython.bint
) -> cython.longlong:
    """Recognise ``t`` (``n >= 2``, ``t[0] == '-'``, ``t != '--'``) against the trie ``tr``.

    Returns ``_pack(code, entry, xpos, dotted)``: ``code`` is the argparse class, ``entry`` the
    resolved entry, ``xpos`` where the explicit value starts (after ``=``, or after a two-character
    spelling's concatenated value), ``dotted`` whether vLLM dropped a dotted member from the name.
    Without ``classify`` an unresolved token may come back as _UNKNOWN even when argparse would
    call it positional (callers that only look for resolved tokens skip that work).
    """
    w: cython.int = tr.width
    node: cython.int = 0
    i: cython.Py_ssize_t = 0
    eq: cython.Py_ssize_t = -1
    dead: cython.bint = False
    space: cython.bint = False
    o: cython.long
    s: cython.int
    e: cython.int
    c: cython.Py_UCS4

    if t[1] == "-":
        # Long flag: the name runs to the first '=' (vLLM: to the first '.', the rest of the name
        # dropped); an unknown name needs no more reading unless the caller classifies it.
        dotted: cython.bint = False
        while i < n:
            c = t[i]
            if c == "=":
                eq = i
                break
            if rewrite and c == ".":
                dotted = True
                i += 1
                while i < n:
                    if t[i] == "=":
                        eq = i
                        break
                    i += 1
                break
            if c == " ":
                space = True
            if not dead:
                if rewrite and c == "_":
                    c = "-"
                o = ord(c)
                s = tr.symbol_of[o] if o < 128 else -1
                if s < 0:
                    dead = True
                else:
                    node = tr.child[node * w + s]
                    dead = node < 0
                if dead and not classify:
                    return _UNKNOWN
            i += 1
        if not dead:
            e = tr.exact[node]
            if e < 0:
                e = tr.unique[node]
            if e >= 0:
                return _pack(_RESOLVED, e, eq + 1 if eq >= 0 else -1, dotted)
            return _AMBIGUOUS
        if eq >= 0 and not space:
            i = eq + 1
            while i < n:
                if t[i] == " ":
                    space = True
                    break
                i += 1
        return _POSITIONAL if space else _UNKNOWN

    # Single-dash flag: exact token; exact name before '='; then argparse's option tuples: a
    # two-character spelling with the rest concatenated, plus every spelling the whole token prefixes.
    nonascii: cython.bint = False
    name_node: cython.int = -1
    short_node: cython.int = -1
    while i < n:
        c = t[i]
        if c == "=":
            if eq < 0:
                eq = i
                name_node = -1 if dead else node
        elif c == " ":
            space = True
        o = ord(c)
        if o >= 128:
            nonascii = True
        if not dead:
            s = tr.symbol_of[o] if o < 128 else -1
            if s < 0:
                dead = True
            else:
                node = tr.child[node * w + s]
                dead = node < 0
        i += 1
        if i == 2:
            short_node = -1 if dead else node
        if dead and i >= 2 and not classify:
            break
    if not dead:
        e = tr.exact[node]
        if e >= 0:
            return _pack(_RESOLVED, e, -1, False)
    if name_node >= 0:
        e = tr.exact[name_node]
        if e >= 0:
            return _pack(_RESOLVED, e, eq + 1, False)
    matches: cython.int = 0
    xpos: cython.Py_ssize_t = -1
    e = -1
    if n > 2 and short_node >= 0 and tr.exact[short_node] >= 0:
        matches = 1
        e = tr.exact[short_node]
        xpos = 2
    if not dead:
        if tr.unique[node] == -2:
            matches += 2
        else:
            matches += 1
            e = tr.unique[node]
            xpos = -1
    if matches == 1:
        return _pack(_RESOLVED, e, xpos, False)
    if matches > 1:
        return _AMBIGUOUS
    if not classify:
        return _UNKNOWN
    if _negative_number(t, n, nonascii) or space:
        return _POSITIONAL
    return _UNKNOWN


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.exceptval(-1, check=True)
def _value_class(tok: object, tr: _Trie, rewrite: cython.bint) -> cython.int:
    """The argparse class of a would-be value: _POSITIONAL (consumable), else 4 for ``--`` or 3/2/1."""
    if not isinstance(tok, str):
        return _POSITIONAL
    t: str = cython.cast(str, tok)
    n: cython.Py_ssize_t = len(t)
    if n < 2 or t[0] != "-":
        return _POSITIONAL
    if n == 2 and t[1] == "-":
        return 4
    return cython.cast(cython.int, _walk(t, n, tr, rewrite, True) & 3)


@cython.cfunc
def _spelled(t: str, xpos: cython.Py_ssize_t) -> str:
    """The flag as the user spelled it (the token without its explicit value)."""
    if xpos < 0:
        return t
    if t[xpos - 1] == "=":
        return t[: xpos - 1]
    return t[:xpos]


def resolve_flag(engine: str, token: object, candidates) -> tuple | None:
    """Recognise one argv token against ``candidates`` (long and short spellings) as ``engine``'s
    parser would: ``(spelling, explicit_value)`` for the candidate it resolves to (``explicit_value``
    is the text after ``=`` or a two-character spelling's concatenated value, else None), or None.

    Ambiguity is tested against ``candidates`` only, never the engine's full table: an abbreviation
    unique among them resolves (errs toward refusing); an exact spelling is never read as a prefix of a
    longer one.  Pass one set holding every key the caller refuses, so that an abbreviation shared by
    two of them stays unresolved, as it is for the engine.
    """
    tr: _Trie = _candidate_trie(candidates)
    if not isinstance(token, str):
        return None
    t: str = cython.cast(str, token)
    n: cython.Py_ssize_t = len(t)
    if n < 2 or t[0] != "-" or (n == 2 and t[1] == "-"):
        return None
    r: cython.longlong = _walk(t, n, tr, _REWRITES.get(engine, False), False)
    if (r & 3) != _RESOLVED:
        return None
    xpos: cython.Py_ssize_t = (r >> 32) - 1
    return (tr.names[((r >> 3) & 0x1FFFFFFF) - 1], t[xpos:] if xpos >= 0 else None)


def find_owned_args(engine: str, args, owned) -> list:
    """Every entry of ``args`` that ``engine`` reads as one of ``owned``: ``[(index, spelled, key)]``.

    Per entry (a value position is checked too) and past ``--``, as §4.2 asks: the webhook refuses a
    key wherever it appears.  ``spelled`` is the flag as written (without ``=value``); ``key`` the owned
    spelling it resolves to.
    """
    tr: _Trie = _candidate_trie(owned)
    rewrite: cython.bint = _REWRITES.get(engine, False)
    found: list = []
    seq: list = args if type(args) is list else ([] if args is None else list(args))
    count: cython.Py_ssize_t = len(seq)
    index: cython.Py_ssize_t
    for index in range(count):
        tok = seq[index]
        if not isinstance(tok, str):
            continue
        t: str = cython.cast(str, tok)
        n: cython.Py_ssize_t = len(t)
        if n < 2 or t[0] != "-" or (n == 2 and t[1] == "-"):
            continue
        r: cython.longlong = _walk(t, n, tr, rewrite, False)
        if (r & 3) == _RESOLVED:
            found.append((index, _spelled(t, (r >> 32) - 1), tr.names[((r >> 3) & 0x1FFFFFFF) - 1]))
    return found


# --- Integers as Python int() reads them --------------------------------------------------------------


def _to_ascii(s: str) -> str:
    """CPython's transform before parsing an int: Unicode spaces → ' ', decimal digits → ASCII."""
    out = []
    for ch in s:
        if ord(ch) < 128:
            out.append(ch)
        elif ch.isspace():
            out.append(" ")
        else:
            digit = unicodedata.decimal(ch, -1)
            out.append(chr(48 + digit) if digit >= 0 else "?")
    return "".join(out)


@cython.cfunc
@cython.inline
def _pyspace(c: cython.Py_UCS4) -> cython.bint:
    return c == " " or ("\t" <= c <= "\r")


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _int_value(value: object) -> object:
    """``int(value)`` for a str, bounded to int64: the int, None (not an integer) or _OUT_OF_RANGE."""
    if not isinstance(value, str):
        return None
    t: str = cython.cast(str, value)
    if not t.isascii():
        t = _to_ascii(t)
    n: cython.Py_ssize_t = len(t)
    i: cython.Py_ssize_t = 0
    while i < n and _pyspace(t[i]):
        i += 1
    negative: cython.bint = False
    if i < n and (t[i] == "+" or t[i] == "-"):
        negative = t[i] == "-"
        i += 1
    if i >= n or not ("0" <= t[i] <= "9"):
        return None
    v: cython.longlong = 0
    d: cython.longlong
    over: cython.bint = False
    c: cython.Py_UCS4
    while i < n:
        c = t[i]
        if "0" <= c <= "9":
            d = cython.cast(cython.longlong, ord(c) - 48)
            if not over:
                if v > (_I64_MAX - d) // 10:
                    over = True
                else:
                    v = v * 10 + d
            i += 1
        elif c == "_":
            i += 1
            if i >= n or not ("0" <= t[i] <= "9"):
                return None
        else:
            break
    while i < n and _pyspace(t[i]):
        i += 1
    if i != n:
        return None
    if over:
        return _OUT_OF_RANGE
    return -v if negative else v


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
    if parsed is _OUT_OF_RANGE:
        return f"{label} value {value!r} is out of range (beyond a 64-bit integer)"
    return f"{label} value {parsed} is less than {minimum}"


def _env_value(env, name: str):
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
    found = _GRAMMARS.get(engine)
    if found is None:
        d.errors = []
        return d
    g: _Grammar = found
    tr: _Trie = g.trie
    rewrite: cython.bint = g.rewrite
    kinds: cython.int[:] = g.kinds
    slots: cython.int[:] = g.slots
    minima: cython.longlong[:] = g.minima
    seq: list = argv if type(argv) is list else ([] if argv is None else list(argv))
    n: cython.Py_ssize_t = len(seq)
    seen: cython.ulonglong = 0
    bad: cython.ulonglong = 0  # slots whose current last value is out of bounds
    pending = None  # slot -> (index, message) for `bad` slots
    errors = None  # [(index, flag, message)] for sticky errors
    i: cython.Py_ssize_t = 0
    tn: cython.Py_ssize_t
    r: cython.longlong
    e: cython.int
    slot: cython.int
    xpos: cython.Py_ssize_t
    at: cython.Py_ssize_t
    klass: cython.int
    v: cython.longlong
    while i < n:
        tok = seq[i]
        if not isinstance(tok, str):
            i += 1
            continue
        t: str = cython.cast(str, tok)
        tn = len(t)
        if tn < 2 or t[0] != "-":
            i += 1
            continue
        if tn == 2 and t[1] == "-":
            break
        r = _walk(t, tn, tr, rewrite, False)
        if (r & 3) != _RESOLVED:
            i += 1
            continue
        e = cython.cast(cython.int, ((r >> 3) & 0x1FFFFFFF) - 1)
        seen |= cython.cast(cython.ulonglong, 1) << e
        if kinds[e] != _K_DEGREE:
            i += 1
            continue
        slot = slots[e]
        xpos = cython.cast(cython.Py_ssize_t, (r >> 32) - 1)
        at = i
        value = None
        if xpos >= 0:
            value = t[xpos:]
        elif i + 1 < n:
            klass = _value_class(seq[i + 1], tr, rewrite)
            if klass == _POSITIONAL:
                i += 1
                value = seq[i]
        if value is None or (r & 4):
            if errors is None:
                errors = []
            label = _label(_spelled(t, xpos), g.canonical[e])
            if r & 4:
                message = f"{label}: vLLM reads a dotted member as a JSON document, which is not an integer"
            else:
                nxt = seq[i + 1] if i + 1 < n else None
                message = _missing_message(label, nxt, _value_class(nxt, tr, rewrite) if i + 1 < n else 0)
            errors.append((at, g.canonical[e], message))
            i += 1
            continue
        parsed = _int_value(value)
        if parsed is None:
            if errors is None:
                errors = []
            label = _label(_spelled(t, xpos), g.canonical[e])
            errors.append((at, g.canonical[e], f"{label} value {value!r} is not an integer"))
        elif parsed is _OUT_OF_RANGE:
            bad |= cython.cast(cython.ulonglong, 1) << slot
            if pending is None:
                pending = {}
            pending[slot] = (
                at,
                g.canonical[e],
                _bound_message(_label(_spelled(t, xpos), g.canonical[e]), value, parsed, minima[e]),
            )
        else:
            v = parsed
            _set_slot(d, slot, v)
            if v < minima[e]:
                bad |= cython.cast(cython.ulonglong, 1) << slot
                if pending is None:
                    pending = {}
                pending[slot] = (
                    at,
                    g.canonical[e],
                    _bound_message(_label(_spelled(t, xpos), g.canonical[e]), value, parsed, minima[e]),
                )
            elif bad & (cython.cast(cython.ulonglong, 1) << slot):
                bad &= ~(cython.cast(cython.ulonglong, 1) << slot)
        i += 1

    if g.dp_entry >= 0 and not (seen & (cython.cast(cython.ulonglong, 1) << g.dp_entry)):
        raw = _env_value(env, g.env_name)
        if raw is not None:
            parsed = _int_value(raw)
            if errors is None:
                errors = []
            if parsed is None:
                errors.append((n, g.env_name, f"env {g.env_name} value {raw!r} is not an integer"))
            elif parsed is _OUT_OF_RANGE or parsed < 1:
                errors.append((n, g.env_name, _bound_message(f"env {g.env_name}", raw, parsed, 1)))
            else:
                _set_slot(d, g.env_slot, parsed)
                d.dp_from_env = True

    if bad:
        if errors is None:
            errors = []
        for slot in range(_NSLOTS):
            if bad & (cython.cast(cython.ulonglong, 1) << slot):
                errors.append(pending[slot])
    if errors:
        errors.sort(key=_first)
        d.errors = [(flag, message) for _, flag, message in errors]
    else:
        d.errors = []
    if seen:
        modes = []
        wiring = []
        declared = []
        for e in range(len(g.canonical)):
            if seen & (cython.cast(cython.ulonglong, 1) << e):
                if kinds[e] == _K_MODE:
                    modes.append(g.canonical[e])
                elif kinds[e] == _K_WIRING:
                    wiring.append(g.canonical[e])
                elif kinds[e] == _K_DEGREE:
                    declared.append(g.canonical[e])
        d.modes = tuple(modes)
        d.wiring = tuple(wiring)
        d.declared = tuple(declared)
    return d


def _first(item):
    return item[0]


# --- Width, --port, stream ------------------------------------------------------------------------------


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
        terms = (
            ("--tensor-parallel-size", degrees.tp),
            ("--pipeline-parallel-size", degrees.pp),
            ("--prefill-context-parallel-size", degrees.pcp),
            dp_factor,
        )
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


@cython.boundscheck(False)
@cython.wraparound(False)
def read_port(engine: str, argv) -> int | None:
    """The engine's ``--port`` on the stream (§4.6): the last occurrence, if it is an integer in
    1..65535, else None.  Recognition is §4.2's against ``--port`` alone; ``--`` ends options."""
    tr: _Trie = _PORT_TRIE
    rewrite: cython.bint = _REWRITES.get(engine, False)
    seq: list = argv if type(argv) is list else ([] if argv is None else list(argv))
    n: cython.Py_ssize_t = len(seq)
    i: cython.Py_ssize_t = 0
    tn: cython.Py_ssize_t
    r: cython.longlong
    xpos: cython.Py_ssize_t
    last = None
    occurred: cython.bint = False
    while i < n:
        tok = seq[i]
        if not isinstance(tok, str):
            i += 1
            continue
        t: str = cython.cast(str, tok)
        tn = len(t)
        if tn < 2 or t[0] != "-":
            i += 1
            continue
        if tn == 2 and t[1] == "-":
            break
        r = _walk(t, tn, tr, rewrite, False)
        if (r & 3) == _RESOLVED:
            occurred = True
            xpos = cython.cast(cython.Py_ssize_t, (r >> 32) - 1)
            last = None
            if xpos >= 0:
                last = t[xpos:]
            elif i + 1 < n and _value_class(seq[i + 1], tr, rewrite) == _POSITIONAL:
                i += 1
                last = seq[i]
        i += 1
    if not occurred or last is None:
        return None
    parsed = _int_value(last)
    if parsed is None or parsed is _OUT_OF_RANGE or not (1 <= parsed <= 65535):
        return None
    return parsed


def stream(role) -> list:
    """The role's single argv stream (§4.1): ``command`` if non-empty, else ``extraArgs``.

    ``role`` is the role as a mapping (API JSON) or an object with ``command`` and ``extra_args``
    (or ``extraArgs``) attributes."""
    if isinstance(role, Mapping):
        command = role.get("command")
        extra = role.get("extraArgs")
    else:
        command = getattr(role, "command", None)
        extra = getattr(role, "extra_args", None)
        if extra is None:
            extra = getattr(role, "extraArgs", None)
    if command:
        return list(command)
    return list(extra) if extra else []
