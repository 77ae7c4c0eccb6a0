"""Structural XML comparison that names the first place two documents differ.

Whitespace around text and between elements is not significant in XDS, and some
attributes (event-id) are ours rather than the vendor's, so byte comparison is too strict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from lxml import etree

_PARSER = etree.XMLParser(remove_comments=True, remove_pis=True)


def _element(xml: bytes | etree._Element) -> etree._Element:
    if isinstance(xml, (bytes, bytearray)):
        return etree.fromstring(bytes(xml), _PARSER)
    return xml


def _children(element: etree._Element) -> list[etree._Element]:
    return [child for child in element if isinstance(child.tag, str)]


def _strip(text: str | None) -> str:
    return (text or "").strip()


def _child_paths(
    path: str, expected: list[etree._Element], actual: list[etree._Element]
) -> list[str]:
    """XPath-like path per child position, indexed only where a tag repeats among siblings."""
    siblings = expected + actual[len(expected):]
    counts = Counter(child.tag for child in siblings)
    seen: Counter[str] = Counter()
    paths = []
    for child in siblings:
        seen[child.tag] += 1
        step = f"{child.tag}[{seen[child.tag]}]" if counts[child.tag] > 1 else child.tag
        paths.append(f"{path}/{step}")
    return paths


def _compare(
    actual: etree._Element, expected: etree._Element, path: str, ignore: frozenset[str]
) -> None:
    if actual.tag != expected.tag:
        raise AssertionError(f"{path}: tag {actual.tag!r} != {expected.tag!r}")
    actual_attrs = {k: v for k, v in actual.attrib.items() if k not in ignore}
    expected_attrs = {k: v for k, v in expected.attrib.items() if k not in ignore}
    if actual_attrs != expected_attrs:
        raise AssertionError(f"{path}: attributes {actual_attrs!r} != {expected_attrs!r}")
    if _strip(actual.text) != _strip(expected.text):
        raise AssertionError(
            f"{path}: text {_strip(actual.text)!r} != {_strip(expected.text)!r}"
        )
    actual_children, expected_children = _children(actual), _children(expected)
    paths = _child_paths(path, expected_children, actual_children)
    for child_path, a, e in zip(paths, actual_children, expected_children):
        _compare(a, e, child_path, ignore)
        if _strip(a.tail) != _strip(e.tail):
            raise AssertionError(f"{child_path}: tail {_strip(a.tail)!r} != {_strip(e.tail)!r}")
    if len(actual_children) != len(expected_children):
        first = paths[min(len(actual_children), len(expected_children))]
        what = "missing" if len(actual_children) < len(expected_children) else "unexpected"
        raise AssertionError(
            f"{first}: {what} ({len(actual_children)} children != {len(expected_children)})"
        )


def assert_same_xml(
    actual: bytes | etree._Element,
    expected: bytes | etree._Element,
    ignore_attrs: Iterable[str] = ("event-id",),
) -> None:
    """Raise AssertionError naming the first path where the two trees differ."""
    actual_root, expected_root = _element(actual), _element(expected)
    _compare(actual_root, expected_root, f"/{expected_root.tag}", frozenset(ignore_attrs))
