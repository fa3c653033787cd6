"""The size of a parsed template: its node count and its nesting depth, bounded.

Parsing is linear in the source, but what follows it is not bound by the source's size:
the compiler, its introspection and Python's own compiler walk every node, some of them
once per enclosing node. So a template's tree is measured right after it is parsed,
before anything else walks it: over MAX_NODES nodes or MAX_TREE_DEPTH levels it is too
complex (422 `template_too_complex` when written, `render_failed` when a stored one is
compiled). The walk is iterative and stops at the first limit passed, so measuring costs
at most MAX_NODES steps whatever the tree.

The limits are far above what a mail needs (a long, richly conditional template has a
few hundred nodes and nests a dozen levels) and low enough that the worst template they
admit is checked and compiled in a fraction of a second. Parsing itself is cut short
too: the sandbox's lexer stops at MAX_TOKENS tokens (`counted`), far more than a tree
within MAX_NODES is written with, so a 100 KB hostile text is refused after a fraction
of its parse.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

from jinja2 import nodes
from jinja2.lexer import Token

MAX_NODES = 5_000  # nodes of one parsed text (subject or body)
MAX_TREE_DEPTH = 64  # levels of nesting: blocks inside blocks, operands inside operators
# tokens of one text: about three per node in a real template, at most five or so
MAX_TOKENS = 6 * MAX_NODES

Limit = Literal["nodes", "depth"]
LIMITS: dict[Limit, int] = {"nodes": MAX_NODES, "depth": MAX_TREE_DEPTH}


class TreeTooLarge(Exception):
    """The text lexes into more tokens than a tree within MAX_NODES is written with."""

    limit: Limit = "nodes"


def counted(tokens: Iterable[Token]) -> Iterator[Token]:
    """The tokens, refused (TreeTooLarge) past MAX_TOKENS: the parser stops there."""
    for count, token in enumerate(tokens, 1):
        if count > MAX_TOKENS:
            raise TreeTooLarge()
        yield token


def over_limit(tree: nodes.Node) -> Limit | None:
    """The first limit the tree passes (`nodes` or `depth`), or None when it fits."""
    count, stack = 0, [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            return "nodes"
        if depth > MAX_TREE_DEPTH:
            return "depth"
        stack.extend((child, depth + 1) for child in node.iter_child_nodes())
    return None
