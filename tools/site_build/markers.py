"""A block marker (`<!-- output ... -->`, `<!-- diff ... -->`, `<!-- account NN -->`, ...) stands on
a line of its own, at the left margin or indented under a list item or in an admonition: what
replaces it gets the marker's indentation, so that it stays in the item or the box.
`<!-- fact NAME -->` is inline (facts.py)."""
import re
import textwrap

KINDS = ("diff", "output", "fact", "repository", "account", "gpu-status")
# A marker the build left in a page (tests/test_site_build.py looks for one in the built HTML).
LEFT_OVER = re.compile(r"<!-- (?:%s)\b[^>]*-->" % "|".join(KINDS))


def block_marker(body):
    """The pattern of a marker line: group 1 its indentation, then the groups of `body`."""
    return re.compile(r"^([ \t]*)<!-- " + body + r" -->[ \t]*$", re.M)


def expand(pattern, markdown, make):
    """Each marker of `pattern` replaced by make(match), indented as the marker was."""
    return pattern.sub(lambda m: textwrap.indent(make(m), m.group(1)), markdown)
