"""fastpath.quantity: exact Kubernetes quantities, compiled and interpreted alike."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastpath import quantity
from fastpath.pure import is_compiled, load

interpreted = load("quantity")
BOTH = pytest.mark.parametrize("q", [quantity, interpreted], ids=["compiled", "interpreted"])


def test_compiled_extension_is_loaded() -> None:
    assert is_compiled(quantity), (
        f"fastpath.quantity was imported from {quantity.__file__}, not a compiled extension: build it "
        "with `python setup.py build_ext --inplace` (or `pip install -e .`) before running the tests"
    )
    assert not is_compiled(interpreted)


@BOTH
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", (0, 1)),
        ("-0", (0, 1)),
        ("1", (1, 1)),
        ("+1", (1, 1)),
        ("-1", (-1, 1)),
        ("100m", (1, 10)),
        ("1500m", (3, 2)),
        ("0.5", (1, 2)),
        (".5", (1, 2)),
        ("5.", (5, 1)),
        ("1k", (1000, 1)),
        ("1M", (10**6, 1)),
        ("1G", (10**9, 1)),
        ("1T", (10**12, 1)),
        ("1P", (10**15, 1)),
        ("1E", (10**18, 1)),
        ("1u", (1, 10**6)),
        ("1n", (1, 10**9)),
        ("1Ki", (1024, 1)),
        ("1Mi", (2**20, 1)),
        ("24Gi", (24 * 2**30, 1)),
        ("1.5Gi", (3 * 2**29, 1)),
        ("1Ti", (2**40, 1)),
        ("1Pi", (2**50, 1)),
        ("2Ei", (2**61, 1)),
        ("1e3", (1000, 1)),
        ("1E3", (1000, 1)),
        ("1e+3", (1000, 1)),
        ("25e-2", (1, 4)),
        ("-2.5E-2", (-1, 40)),
        ("123456789012345678901234567890", (123456789012345678901234567890, 1)),
        ("0.000000000000000000001", (1, 10**21)),
    ],
)
def test_parse_text(q, text: str, expected: tuple[int, int]) -> None:
    assert q.parse(text) == expected


@BOTH
def test_parse_numbers(q) -> None:
    assert q.parse(3) == (3, 1)
    assert q.parse(-7) == (-7, 1)
    # A YAML float is read as the digits written, never as its binary expansion.
    assert q.parse(0.1) == (1, 10)
    assert q.parse(1.5) == (3, 2)
    assert q.parse(1e20) == (10**20, 1)


@BOTH
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "empty"),
        (" 1", "digit"),
        ("1 ", "suffix"),
        ("abc", "digit"),
        (".", "digit"),
        ("-", "digit"),
        ("1..2", "suffix"),
        ("1x", "suffix"),
        ("1ki", "suffix"),
        ("1KiB", "suffix"),
        ("1e", "suffix"),
        ("1e1.5", "exponent"),
        ("1e-", "exponent"),
        ("1e99999", "out of range"),
        ("1" * 1001, "digits"),
        (True, "string or a number"),
        (None, "string or a number"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        ([1], "string or a number"),
    ],
)
def test_garbage_is_refused_with_a_reason(q, value: object, why: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity") as error:
        q.parse(value)
    assert why in str(error.value)


# Where the compiled module leaves C integers for Python's (a mantissa of 18 digits, a result near
# 2**62, an exponent of ±18): both twins must give the exact reduced fraction on either side.
EDGES = [
    "999999999999999999", "9999999999999999999", "0.000000000000000001", "-0.00000000000000000001",
    "4611686018427387903", "4611686018427387904", "461168601842738790k", "4611686018427387.9k",
    "3Ei", "4Ei", "-4Ei", "3.999999999999999999Ei", "1e18", "1e19", "1e-18", "1e-19", "123456789e10",
    "0.5Gi", "1.5Gi", "-2.50e-3", "0e999", "-0", "-0.0m", "12345678901234567.8n", "4.611686018427387903E",
]  # fmt: skip


@pytest.mark.parametrize("text", EDGES)
def test_twins_agree_where_c_integers_end(text: str) -> None:
    scale = {"Ei": Fraction(2**60), "Gi": Fraction(2**30), "k": Fraction(10**3), "m": Fraction(1, 10**3),
             "n": Fraction(1, 10**9), "E": Fraction(10**18)}  # fmt: skip
    suffix = next((s for s in scale if text.endswith(s) and not text[: -len(s)].endswith(("e", "E"))), "")
    exact = Fraction(Decimal(text[: len(text) - len(suffix)])) * scale.get(suffix, 1)
    expected = (exact.numerator, exact.denominator)
    assert quantity.parse(text) == interpreted.parse(text) == expected
    assert quantity.whole(text) == interpreted.whole(text)


@BOTH
def test_whole(q) -> None:
    assert q.whole("1") == 1
    assert q.whole(16384) == 16384
    assert q.whole("16Ki") == 16384
    assert q.whole("2k") == 2000
    assert q.whole("1.0") == 1
    assert q.whole("1m") is None
    assert q.whole("0.5") is None
    assert q.whole("-3") == -3
    assert q.whole("0") == 0
    with pytest.raises(ValueError):
        q.whole("one")


@BOTH
def test_milli_rounds_up_and_floor_div(q) -> None:
    assert q.milli("1") == 1000
    assert q.milli("1.5") == 1500
    assert q.milli("100m") == 100
    assert q.milli("1n") == 1  # rounded up, as Kubernetes' MilliValue does
    assert q.milli("-1n") == 0
    assert q.floor_div("24Gi", 2**20) == 24576
    assert q.floor_div("81920Mi", 2**20) == 81920
    assert q.floor_div("1", 2**20) == 0


@BOTH
def test_compare(q) -> None:
    assert q.compare("1Ki", 1024) == 0
    assert q.compare("1k", "1Ki") == -1
    assert q.compare("1.5", "1500m") == 0
    assert q.compare("2", "1999m") == 1
    assert q.compare("-1", "0") == -1


# --- Property tests -------------------------------------------------------------------------------

DECIMAL_SI = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


@st.composite
def quantities(draw) -> tuple[str, Fraction]:
    sign = draw(st.sampled_from(["", "+", "-"]))
    integer = draw(st.text("0123456789", max_size=25))
    fraction = draw(st.text("0123456789", max_size=25))
    dot = draw(st.booleans()) or (not integer)
    if not dot:
        fraction = ""
    if not integer and not fraction:
        integer = "0"
    number = integer + ("." + fraction if dot else "")
    kind = draw(st.sampled_from(["decimal", "binary", "exponent"]))
    digits = (integer or "0") + "." + (fraction or "0")
    exact = Fraction(Decimal(digits))
    if sign == "-":
        exact = -exact
    if kind == "decimal":
        suffix = draw(st.sampled_from(sorted(DECIMAL_SI)))
        exact *= Fraction(10) ** DECIMAL_SI[suffix]
    elif kind == "binary":
        suffix = draw(st.sampled_from(sorted(BINARY_SI)))
        exact *= 2 ** BINARY_SI[suffix]
    else:
        exponent = draw(st.integers(-40, 40))
        mark = draw(st.sampled_from(["e", "E"]))
        explicit_plus = draw(st.booleans()) and exponent >= 0
        suffix = f"{mark}{'+' if explicit_plus else ''}{exponent}"
        exact *= Fraction(10) ** exponent
    return sign + number + suffix, exact


@settings(max_examples=400, deadline=None)
@given(quantities())
def test_parse_matches_the_fractions_reference(case: tuple[str, Fraction]) -> None:
    text, exact = case
    for q in (quantity, interpreted):
        num, den = q.parse(text)
        assert Fraction(num, den) == exact
        assert den > 0
        assert Fraction(num, den).denominator == den  # reduced
        assert q.whole(text) == (exact.numerator if exact.denominator == 1 else None)
        assert q.milli(text) == -((-exact * 1000).numerator // (-exact * 1000).denominator)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=12), st.integers(), st.floats(allow_nan=False, allow_infinity=False)))
def test_compiled_and_interpreted_agree_on_anything(value: object) -> None:
    def outcome(q) -> object:
        try:
            return ("ok", q.parse(value), q.whole(value))
        except ValueError as error:
            return ("error", str(error))

    assert outcome(quantity) == outcome(interpreted)


@settings(max_examples=200, deadline=None)
@given(quantities(), quantities())
def test_compare_matches_the_reference(a: tuple[str, Fraction], b: tuple[str, Fraction]) -> None:
    expected = (a[1] > b[1]) - (a[1] < b[1])
    assert quantity.compare(a[0], b[0]) == expected
    assert interpreted.compare(a[0], b[0]) == expected
