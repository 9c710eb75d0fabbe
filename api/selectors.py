"""Label selectors (``metav1.LabelSelector``): whether one parses, and what it selects.

The apiserver's own grammar: ``matchLabels`` keys are qualified names and values label values;
``In``/``NotIn`` need at least one value, ``Exists``/``DoesNotExist`` take none.  ``{}`` (and an
absent selector) selects everything, as a Node selector of a TopologySource does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from api.naming import is_qualified_name

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def is_label_value(value: Any) -> bool:
    """At most 63 alphanumerics, ``-``, ``_`` or ``.``, alphanumeric at both ends (or empty)."""
    return isinstance(value, str) and len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def problems(selector: Any) -> list[tuple[str, str]]:
    """``(relative path, what is wrong)`` for each part of ``selector`` that does not parse."""
    if selector is None:
        return []
    if not isinstance(selector, Mapping):
        return [("", "must be a label selector object ({} selects everything)")]
    out: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        if not is_qualified_name(str(key)):
            out.append((f"matchLabels[{key}]", "the key must be a qualified label name (prefix/name)"))
        if not is_label_value(value):
            out.append(
                (
                    f"matchLabels[{key}]",
                    "the value must be a label value: at most 63 alphanumerics, '-', '_' or '.'",
                )
            )
    for index, term in enumerate(selector.get("matchExpressions") or []):
        at = f"matchExpressions[{index}]"
        if not isinstance(term, Mapping):
            out.append((at, "must be an object with key, operator and values"))
            continue
        key, operator, values = term.get("key"), term.get("operator"), term.get("values") or []
        if not isinstance(key, str) or not is_qualified_name(key):
            out.append((f"{at}.key", "must be a qualified label name (prefix/name)"))
        if operator not in OPERATORS:
            out.append((f"{at}.operator", f"must be one of {', '.join(OPERATORS)}"))
        elif operator in ("In", "NotIn") and not values:
            out.append((f"{at}.values", f"{operator} needs at least one value"))
        elif operator in ("Exists", "DoesNotExist") and values:
            out.append((f"{at}.values", f"{operator} takes no values; remove them"))
        for position, value in enumerate(values):
            if not is_label_value(value):
                out.append((f"{at}.values[{position}]", "must be a label value"))
    return out


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector`` (every term; ``{}`` matches everything)."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for term in selector.get("matchExpressions") or []:
        key, operator = term.get("key"), term.get("operator")
        values = term.get("values") or []
        present = key in labels
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator == "In" and (not present or labels[key] not in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator not in OPERATORS:
            return False
    return True
