"""mkdocs-jupyter's CSS (about 575 KB, shared by the notebook pages: notebook_css.py) styles all of
JupyterLab: menus, dialogs, its icons as data URIs. A notebook page uses a few percent of it. After
the build each shared file keeps the rules that can match a page linking one of them: a rule goes
when every one of its selectors names a class or an id that none of those pages has (no script on
them adds JupyterLab's classes), or puts `:root` inside another element; a selector, or a file, it
cannot read stays."""
import re

import tinycss2

NAMES = re.compile(r"([.#])(-?[_a-zA-Z][\w-]*)")
NOT = re.compile(r":not\([^()]*\)")  # what it names need not be there


def _used(pages):
    """The class names and ids of the pages' elements."""
    classes, ids = set(), set()
    for text in pages:
        for value in re.findall(r'\bclass="([^"]*)"', text):
            classes.update(value.split())
        ids.update(re.findall(r'\bid="([^"]*)"', text))
    return classes, ids


def _can_match(selector, classes, ids):
    if "\\" in selector or re.search(r":(is|where|has|matches)\(", selector):
        return True  # not read here: kept
    selector = re.sub(r"\[[^\]]*\]", "", NOT.sub("", selector)).strip()  # (a dot in [href$=".py"] is no class)
    if re.search(r"[\s>+~]:root\b", selector):
        return False  # the root element inside another (`.jupyter-wrapper :root`): none
    return all(name in (classes if kind == "." else ids) for kind, name in NAMES.findall(selector))


def _selectors(prelude):
    """The selectors of a list, split at its commas (those in `:not(.a, .b)` are the function's)."""
    parts = [[]]
    for token in prelude:
        if token.type == "literal" and token.value == ",":
            parts.append([])
        else:
            parts[-1].append(token)
    return [tinycss2.serialize(p) for p in parts]


def _prune(rules, classes, ids):
    kept = []
    for rule in rules:
        if rule.type == "qualified-rule":
            if not any(_can_match(s, classes, ids) for s in _selectors(rule.prelude)):
                continue
        elif rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports") and rule.content:
            inner = tinycss2.parse_blocks_contents(rule.content, skip_comments=True, skip_whitespace=True)
            if not any(r.type == "error" for r in inner):  # (one it cannot read stays whole)
                inner = _prune(inner, classes, ids)
                if not inner:
                    continue
                rule.content = inner
        kept.append(rule)
    return kept


def prune_css(css, classes, ids):
    """The CSS without the rules that can match no element with those classes and ids."""
    rules = tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True)
    if any(r.type == "error" for r in rules):
        return css  # not read here: kept as it is
    return "".join(tinycss2.serialize([r]) for r in _prune(rules, classes, ids))


def prune_notebook_css(site_dir, folder="assets/notebook-css"):
    """The notebook pages' shared CSS files, pruned against the pages that link one of them."""
    files = sorted((site_dir / folder).glob("*.css"))
    pages = [p.read_text() for p in site_dir.rglob("*.html") if p.relative_to(site_dir).parts[0] != "files"]
    classes, ids = _used([t for t in pages if any(f"/{f.name}" in t for f in files)])
    for css in files:
        css.write_text(prune_css(css.read_text(), classes, ids))
