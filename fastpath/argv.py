"""The engine command-line reader (model-deployment.md §4): how an engine's parser reads one argv
token, compiled by Cython from this source.

Every consumer of a role's argv calls into this module or ``fastpath.degrees`` (the degree tables
built on it): the ModelDeployment webhook (owned args, ``--port``), the renderer (``--port``/
``--host`` fill) and the Pod KV-cache injector (owned args in every spelling the engine parser
accepts).

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
interpreted too (``fastpath.pure.load("argv")``) and answers identically.  ``argv.pxd`` shares the
trie and the token walk with ``fastpath.degrees``.
"""

import re
import unicodedata
from array import array
from collections.abc import Mapping

import cython

from api.engines import GRAMMARS, PORT_FLAG

__all__ = [
    "find_owned_args",
    "read_port",
    "resolve_flag",
    "stream",
]

if not cython.compiled:  # compiled, these are argv.pxd's C enum
    # Token classes returned by walk (low two bits of the packed result).
    POSITIONAL = 0  # argparse 'A': a value / positional
    RESOLVED = 1  # a spelling of the table (entry and explicit value follow)
    AMBIGUOUS = 2  # an abbreviation of several spellings: passes through
    UNKNOWN = 3  # flag-looking, not in the table

_I64_MAX = cython.declare(cython.longlong, 9223372036854775807)

# argparse's own negative-number test; used only for tokens with non-ASCII characters (\d is Unicode).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")

OUT_OF_RANGE = object()  # int_value: syntactically an integer, beyond int64


# --- Tries -------------------------------------------------------------------------------------------


@cython.cclass
class Trie:
    """Every prefix of every spelling, as flat arrays indexed by node (fields in ``argv.pxd``).

    ``child[node * width + symbol]`` is the next node or -1; ``exact[node]`` the entry spelled exactly
    by the path to ``node`` or -1; ``unique[node]`` the entry when exactly one spelling has that
    prefix, -2 when several do.  ``symbol_of[code]`` maps an ASCII code to a symbol or -1.
    """

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


def check_spelling(spelling: object) -> str:
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


_REWRITES = {name: grammar.rewrites_names for name, grammar in GRAMMARS.items()}

_CANDIDATES: dict = {}


def _candidate_trie(candidates) -> Trie:
    """The trie of a candidate set (owned keys, ``--port``…), built once per distinct set."""
    if isinstance(candidates, str):
        candidates = (candidates,)
    key = candidates if type(candidates) is frozenset else frozenset(candidates)
    found = _CANDIDATES.get(key)
    if found is not None:
        return found
    names = sorted(check_spelling(spelling) for spelling in key)
    trie = Trie(names, list(range(len(names))), names)
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
@cython.exceptval(-1, check=True)
def walk(
    t: str, n: cython.Py_ssize_t, tr: Trie, rewrite: cython.bint, classify: cython.bint
) -> cython.longlong:
    """Recognise ``t`` (``n >= 2``, ``t[0] == '-'``, ``t != '--'``) against the trie ``tr``.

    Returns ``_pack(code, entry, xpos, dotted)``: ``code`` is the argparse class, ``entry`` the
    resolved entry, ``xpos`` where the explicit value starts (after ``=``, or after a two-character
    spelling's concatenated value), ``dotted`` whether vLLM dropped a dotted member from the name.
    Without ``classify`` an unresolved token may come back as UNKNOWN even when argparse would
    call it positional (callers that only look for resolved tokens skip that work).
    """
    if t[1] == "-":
        return _walk_long(t, n, tr, rewrite, classify)
    return _walk_short(t, n, tr, classify)


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.exceptval(-1, check=True)
def _walk_long(
    t: str, n: cython.Py_ssize_t, tr: Trie, rewrite: cython.bint, classify: cython.bint
) -> cython.longlong:
    """A long flag: the name runs to the first '=' (vLLM: to the first '.', the rest of the name
    dropped); an unknown name needs no more reading unless the caller classifies it."""
    w: cython.int = tr.width
    node: cython.int = 0
    i: cython.Py_ssize_t = 0
    eq: cython.Py_ssize_t = -1
    dead: cython.bint = False
    space: cython.bint = False
    dotted: cython.bint = False
    o: cython.long
    s: cython.int
    e: cython.int
    c: cython.Py_UCS4
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
                return UNKNOWN
        i += 1
    if not dead:
        e = tr.exact[node]
        if e < 0:
            e = tr.unique[node]
        if e >= 0:
            return _pack(RESOLVED, e, eq + 1 if eq >= 0 else -1, dotted)
        return AMBIGUOUS
    if eq >= 0 and not space:
        i = eq + 1
        while i < n:
            if t[i] == " ":
                space = True
                break
            i += 1
    return POSITIONAL if space else UNKNOWN


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.exceptval(-1, check=True)
def _walk_short(t: str, n: cython.Py_ssize_t, tr: Trie, classify: cython.bint) -> cython.longlong:
    """A single-dash flag: exact token; exact name before '='; then argparse's option tuples: a
    two-character spelling with the rest concatenated, plus every spelling the whole token prefixes."""
    w: cython.int = tr.width
    node: cython.int = 0
    i: cython.Py_ssize_t = 0
    eq: cython.Py_ssize_t = -1
    dead: cython.bint = False
    space: cython.bint = False
    nonascii: cython.bint = False
    name_node: cython.int = -1
    short_node: cython.int = -1
    o: cython.long
    s: cython.int
    e: cython.int
    c: cython.Py_UCS4
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
            return _pack(RESOLVED, e, -1, False)
    if name_node >= 0:
        e = tr.exact[name_node]
        if e >= 0:
            return _pack(RESOLVED, e, eq + 1, False)
    return _short_options(t, n, tr, node, dead, short_node, classify, nonascii, space)


@cython.cfunc
@cython.exceptval(-1, check=True)
def _short_options(
    t: str,
    n: cython.Py_ssize_t,
    tr: Trie,
    node: cython.int,
    dead: cython.bint,
    short_node: cython.int,
    classify: cython.bint,
    nonascii: cython.bint,
    space: cython.bint,
) -> cython.longlong:
    """argparse's option tuples for a single-dash token that no spelling names exactly: a
    two-character spelling with the rest concatenated, and every spelling the token prefixes."""
    matches: cython.int = 0
    xpos: cython.Py_ssize_t = -1
    e: cython.int = -1
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
        return _pack(RESOLVED, e, xpos, False)
    if matches > 1:
        return AMBIGUOUS
    if not classify:
        return UNKNOWN
    if _negative_number(t, n, nonascii) or space:
        return POSITIONAL
    return UNKNOWN


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.exceptval(-1, check=True)
def value_class(tok: object, tr: Trie, rewrite: cython.bint) -> cython.int:
    """The argparse class of a would-be value: POSITIONAL (consumable), else 4 for ``--`` or 3/2/1."""
    if not isinstance(tok, str):
        return POSITIONAL
    t: str = cython.cast(str, tok)
    n: cython.Py_ssize_t = len(t)
    if n < 2 or t[0] != "-":
        return POSITIONAL
    if n == 2 and t[1] == "-":
        return 4
    return cython.cast(cython.int, walk(t, n, tr, rewrite, True) & 3)


@cython.cfunc
def spelled(t: str, xpos: cython.Py_ssize_t) -> str:
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
    tr: Trie = _candidate_trie(candidates)
    if not isinstance(token, str):
        return None
    t: str = cython.cast(str, token)
    n: cython.Py_ssize_t = len(t)
    if n < 2 or t[0] != "-" or (n == 2 and t[1] == "-"):
        return None
    r: cython.longlong = walk(t, n, tr, _REWRITES.get(engine, False), False)
    if (r & 3) != RESOLVED:
        return None
    xpos: cython.Py_ssize_t = (r >> 32) - 1
    return (tr.names[((r >> 3) & 0x1FFFFFFF) - 1], t[xpos:] if xpos >= 0 else None)


def find_owned_args(engine: str, args, owned) -> list:
    """Every entry of ``args`` that ``engine`` reads as one of ``owned``: ``[(index, spelled, key)]``.

    Per entry (a value position is checked too) and past ``--``, as §4.2 asks: the webhook refuses a
    key wherever it appears.  ``spelled`` is the flag as written (without ``=value``); ``key`` the owned
    spelling it resolves to.
    """
    tr: Trie = _candidate_trie(owned)
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
        r: cython.longlong = walk(t, n, tr, rewrite, False)
        if (r & 3) == RESOLVED:
            found.append((index, spelled(t, (r >> 32) - 1), tr.names[((r >> 3) & 0x1FFFFFFF) - 1]))
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
def int_value(value: object) -> object:
    """``int(value)`` for a str, bounded to int64: the int, None (not an integer) or OUT_OF_RANGE."""
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
        return OUT_OF_RANGE
    return -v if negative else v


# --- --port, stream ------------------------------------------------------------------------------------


@cython.boundscheck(False)
@cython.wraparound(False)
def read_port(engine: str, argv) -> int | None:
    """The engine's ``--port`` on the stream (§4.6): the last occurrence, if it is an integer in
    1..65535, else None.  Recognition is §4.2's against ``--port`` alone; ``--`` ends options."""
    tr: Trie = _PORT_TRIE
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
        r = walk(t, tn, tr, rewrite, False)
        if (r & 3) == RESOLVED:
            occurred = True
            xpos = cython.cast(cython.Py_ssize_t, (r >> 32) - 1)
            last = None
            if xpos >= 0:
                last = t[xpos:]
            elif i + 1 < n and value_class(seq[i + 1], tr, rewrite) == POSITIONAL:
                i += 1
                last = seq[i]
        i += 1
    if not occurred or last is None:
        return None
    parsed = int_value(last)
    if parsed is None or parsed is OUT_OF_RANGE or not (1 <= parsed <= 65535):
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
