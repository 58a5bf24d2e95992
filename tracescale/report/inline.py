"""A full HTML report page -> a fragment for a notebook cell (Jupyter, VS Code): same content,
scoped so several reports share one page.

The standalone page (``report.html``) styles ``body`` and uses fixed element ids; pasted twice
into a notebook, the second report's styles and ids would clash with the first and with the
notebook's own. So every id gets a per-report prefix, every CSS selector is rewritten to live
under the report's container, and the chart script runs against a ``document`` that only sees
its own container. Colours follow the notebook: text inherits the cell's colour, and the few
accents switch with JupyterLab's and VS Code's theme markers or ``prefers-color-scheme``.
Nothing is fetched: the fragment is as offline as the page it comes from.
"""

from __future__ import annotations

import re
import uuid
from importlib import resources

_STYLE = re.compile(r"<style[^>]*>(.*?)</style>", re.S)
_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.S)
_MAIN = re.compile(r"<main\b")
_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<code>.*?)</script>", re.S)
_ID_ATTR = re.compile(r'\b(id|for|aria-labelledby|aria-describedby)="([^"]+)"')
_HREF_ANCHOR = re.compile(r'\bhref="#([^"]+)"')
_ID_SELECTOR = re.compile(r"#([A-Za-z_][\w-]*)")
_ELEMENT = re.compile(r"(?<![\w.#:-])(html|body|main)(?![\w-])")
_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def _asset(name: str) -> str:
    return resources.files("tracescale.report").joinpath("assets", name).read_text("utf-8")


def _scope_selector(sel: str, root: str, uid: str) -> str:
    sel = _ID_SELECTOR.sub(lambda m: f"#{uid}-{m.group(1)}", sel.strip())
    head = _ELEMENT.match(sel)
    if head and head.group(1) in ("html", "body"):
        rest = sel[head.end() :].strip()
        return f"{root} {rest}" if rest else root
    sel = _ELEMENT.sub(lambda m: "[data-ts-main]" if m.group(1) == "main" else m.group(1), sel)
    return f"{root} {sel}"


def scope_css(css: str, root: str, uid: str) -> str:
    """Every rule of ``css`` moved under ``root`` (``body`` becomes the root itself), ids
    prefixed with ``uid``; ``@media``/``@supports`` blocks are scoped inside, other at-rules
    (``@keyframes``, ``@font-face``) are kept as they are."""
    css = _COMMENT.sub("", css)
    out: list[str] = []
    i = 0
    while i < len(css):
        brace = css.find("{", i)
        if brace < 0:
            break
        head = css[i:brace].strip()
        depth, j = 1, brace + 1
        while j < len(css) and depth:
            depth += {"{": 1, "}": -1}.get(css[j], 0)
            j += 1
        inner = css[brace + 1 : j - 1]
        if head.startswith(("@media", "@supports")):
            out.append(f"{head} {{\n{scope_css(inner, root, uid)}}}\n")
        elif head.startswith("@"):
            out.append(f"{head} {{{inner}}}\n")
        elif head:
            sels = ", ".join(_scope_selector(s, root, uid) for s in head.split(","))
            out.append(f"{sels} {{{inner.strip()}}}\n")
        i = j
    return "".join(out)


def _prefix_ids(markup: str, uid: str) -> str:
    markup = _ID_ATTR.sub(
        lambda m: f'{m.group(1)}="' + " ".join(f"{uid}-{x}" for x in m.group(2).split()) + '"',
        markup,
    )
    return _HREF_ANCHOR.sub(lambda m: f'href="#{uid}-{m.group(1)}"', markup)


def inline_report(page: str, uid: str | None = None) -> str:
    """The body of a standalone report page as one scoped ``<div>`` (see the module doc)."""
    uid = uid or "ts-" + uuid.uuid4().hex[:12]
    root = f"#{uid}"
    body_match = _BODY.search(page)
    body = _STYLE.sub("", body_match.group(1) if body_match else page)
    css = scope_css("\n".join(_STYLE.findall(page)), root, uid)
    css += _COMMENT.sub("", _asset("inline.css")).replace("__ROOT__", root)
    parts: list[str] = []
    pos = 0
    for m in _SCRIPT.finditer(body):
        parts.append(_prefix_ids(body[pos : m.start()], uid))
        attrs, code = m.group("attrs"), m.group("code")
        if "application/json" in attrs:
            parts.append(f"<script{_prefix_ids(attrs, uid)}>{code}</script>")
        else:
            runner = _asset("inline.js").replace("__UID__", uid)
            parts.append("<script>" + runner.replace("__CODE__", code, 1) + "</script>")
        pos = m.end()
    parts.append(_prefix_ids(body[pos:], uid))
    # One <main> per page: a notebook holding several reports gets <div data-ts-main> instead.
    markup = _MAIN.sub("<div data-ts-main", "".join(parts)).replace("</main>", "</div>")
    return f'<div class="tracescale-report" id="{uid}"><style>{css}</style>{markup.strip()}</div>'
