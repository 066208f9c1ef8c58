"""A small Markdown → HTML converter for the subset ``attnroof sheet`` writes.

Blocks: ATX headings (``#`` … ``######``), paragraphs, pipe tables with an alignment row,
bullet and numbered lists (nested by indentation), fenced code blocks, block quotes and
horizontal rules. Inline: ``code``, **bold**, *italic*, [links](url). Everything else is text,
escaped, so a ``<`` in the sheet can never become markup.

>>> to_html("# Title\\n\\nA **bold** `x < y`.")
'<h1 id="title">Title</h1>\\n<p>A <strong>bold</strong> <code>x &lt; y</code>.</p>'
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from attnroof.escaping import escape_output

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)\s*$")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$")
_QUOTE = re.compile(r"^\s*>\s?(.*)$")

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_ITALIC = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_SAFE_URL = re.compile(r"^(https?:|mailto:|#|\.{0,2}/|[\w.-]+(/|$))", re.I)


def _escape(text: str) -> str:
    return html.escape(escape_output(text), quote=True)  # a control character shown escaped


def _emphasis(escaped: str) -> str:
    out = _BOLD.sub(r"<strong>\1</strong>", escaped)
    return _ITALIC.sub(r"<em>\1</em>", out)


def _links(text: str) -> str:
    """Escaped text with its links made anchors (unsafe schemes such as javascript: stay text)."""

    def anchor(m: re.Match[str]) -> str:
        label, url = m.group(1), html.unescape(m.group(2))
        if not _SAFE_URL.match(url):
            return m.group(0)
        return f'<a href="{_escape(url)}">{label}</a>'

    return _LINK.sub(anchor, text)


def inline(text: str) -> str:
    """One line of Markdown text → HTML: code spans first (their content is literal), then links,
    bold and italic on the escaped rest.

    >>> inline("**I** = F / bytes, `a*b` and *x* <b>")
    '<strong>I</strong> = F / bytes, <code>a*b</code> and <em>x</em> &lt;b&gt;'
    """
    parts: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(text):
        parts.append(_emphasis(_links(_escape(text[pos : m.start()]))))
        parts.append(f"<code>{_escape(m.group(2).strip())}</code>")
        pos = m.end()
    parts.append(_emphasis(_links(_escape(text[pos:]))))
    return "".join(parts)


def _slug(text: str, used: set[str]) -> str:
    base = re.sub(r"[^\w\s-]", "", re.sub(r"<[^>]+>", "", text)).strip().lower()
    base = re.sub(r"[\s_]+", "-", base) or "section"
    slug, n = base, 1
    while slug in used:
        n += 1
        slug = f"{base}-{n}"
    used.add(slug)
    return slug


def _split_row(line: str) -> list[str]:
    """Cells of a pipe-table row; ``\\|`` is a literal bar; bars inside code spans split (as GFM)."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    cells = re.split(r"(?<!\\)\|", body)
    return [c.strip().replace("\\|", "|") for c in cells]


def _alignments(sep: str) -> list[str]:
    out = []
    for cell in _split_row(sep):
        left, right = cell.startswith(":"), cell.endswith(":")
        out.append("center" if left and right else "right" if right else "left" if left else "")
    return out


def _table(header: str, sep: str, rows: list[str]) -> str:
    aligns = _alignments(sep)
    heads = _split_row(header)
    width = len(heads)

    def cell(tag: str, text: str, i: int) -> str:
        align = aligns[i] if i < len(aligns) else ""
        attr = f' class="{align}"' if align else ""
        return f"<{tag}{attr}>{inline(text)}</{tag}>"

    lines = [
        "<table>",
        "<thead><tr>" + "".join(cell("th", h, i) for i, h in enumerate(heads)) + "</tr></thead>",
    ]
    if rows:
        lines.append("<tbody>")
        for row in rows:
            cells = (_split_row(row) + [""] * width)[:width]
            lines.append("<tr>" + "".join(cell("td", c, i) for i, c in enumerate(cells)) + "</tr>")
        lines.append("</tbody>")
    lines.append("</table>")
    return "\n".join(lines)


@dataclass
class _Item:
    text: list[str] = field(default_factory=list)
    children: list[_List] = field(default_factory=list)


@dataclass
class _List:
    indent: int
    ordered: bool
    start: int = 1
    items: list[_Item] = field(default_factory=list)

    def html(self) -> str:
        tag = "ol" if self.ordered else "ul"
        start = f' start="{self.start}"' if self.ordered and self.start != 1 else ""
        body = []
        for item in self.items:
            inner = inline(" ".join(t.strip() for t in item.text))
            inner += "".join("\n" + child.html() for child in item.children)
            body.append(f"<li>{inner}</li>")
        return f"<{tag}{start}>\n" + "\n".join(body) + f"\n</{tag}>"


def _list(lines: list[str]) -> str:
    """Consecutive list lines (items and their continuation lines) → nested ``<ul>``/``<ol>``."""
    root: _List | None = None
    stack: list[_List] = []
    for line in lines:
        m = _LIST_ITEM.match(line)
        if not m:
            if stack and stack[-1].items:
                stack[-1].items[-1].text.append(line)
            continue
        indent, marker, text = len(m.group(1).expandtabs(4)), m.group(2), m.group(3)
        ordered = marker[0].isdigit()
        while stack and indent < stack[-1].indent:
            stack.pop()
        if not stack or indent > stack[-1].indent:
            new = _List(indent, ordered, int(marker[:-1]) if ordered else 1)
            if stack and stack[-1].items:
                stack[-1].items[-1].children.append(new)
            elif root is None:
                root = new
            stack.append(new)
        stack[-1].items.append(_Item([text]))
    assert root is not None
    return root.html()


def to_html(markdown: str, *, heading_offset: int = 0) -> str:
    """Markdown (the sheet's subset) → an HTML fragment. ``heading_offset`` demotes headings
    (1 makes ``#`` an ``<h2>``), for embedding in a page that has its own title."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    used: set[str] = set()
    i, n = 0, len(lines)

    def is_block_start(k: int) -> bool:
        line = lines[k]
        return bool(
            not line.strip()
            or _HEADING.match(line)
            or _FENCE.match(line)
            or _RULE.match(line)
            or _LIST_ITEM.match(line)
            or _QUOTE.match(line)
            or (line.lstrip().startswith("|") and k + 1 < n and _TABLE_SEP.match(lines[k + 1]))
        )

    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if m := _FENCE.match(line):
            fence, lang = m.group(1), m.group(2)
            i += 1
            body = []
            while i < n and not lines[i].strip().startswith(fence):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end of the text)
            cls = f' class="language-{_escape(lang)}"' if lang else ""
            out.append(f"<pre><code{cls}>{_escape(chr(10).join(body))}</code></pre>")
            continue
        if m := _HEADING.match(line):
            level = min(6, len(m.group(1)) + heading_offset)
            text = inline(m.group(2))
            out.append(f'<h{level} id="{_slug(text, used)}">{text}</h{level}>')
            i += 1
            continue
        if _RULE.match(line):
            out.append("<hr>")
            i += 1
            continue
        if line.lstrip().startswith("|") and i + 1 < n and _TABLE_SEP.match(lines[i + 1]):
            header, sep = line, lines[i + 1]
            i += 2
            rows = []
            while i < n and lines[i].strip().startswith("|"):
                rows.append(lines[i])
                i += 1
            out.append(_table(header, sep, rows))
            continue
        if _LIST_ITEM.match(line):
            block: list[str] = []
            while i < n and lines[i].strip():
                if (
                    block
                    and not _LIST_ITEM.match(lines[i])
                    and is_block_start(i)
                    and not lines[i].startswith(" ")
                ):
                    break
                block.append(lines[i])
                i += 1
            out.append(_list(block))
            continue
        if _QUOTE.match(line):
            quoted = []
            while i < n and (m := _QUOTE.match(lines[i])):
                quoted.append(m.group(1))
                i += 1
            out.append(
                f"<blockquote>\n{to_html(chr(10).join(quoted), heading_offset=heading_offset)}\n</blockquote>"
            )
            continue
        para = [line]
        i += 1
        while i < n and not is_block_start(i):
            para.append(lines[i])
            i += 1
        pieces = []
        for k, p in enumerate(para):
            hard = k < len(para) - 1 and (p.endswith("  ") or p.endswith("\\"))
            pieces.append(inline(p.strip().rstrip("\\").rstrip() if hard else p.strip()))
            if k < len(para) - 1:
                pieces.append("<br>\n" if hard else "\n")
        out.append("<p>" + "".join(pieces) + "</p>")
    return "\n".join(out)
