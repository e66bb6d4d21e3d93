#!/usr/bin/env python3
"""Checks that every relative link of the Markdown files resolves.

A link is an inline link or image ([text](target), ![alt](target)), a
reference definition ([name]: target) or an HTML <a href="target"> or
<img src="target">, outside fenced code blocks and code spans.  A link
with a scheme (https:, mailto:, ...) or starting with // is not checked.
A relative target (to the linking file's directory, or to the top of the
tree if it starts with /) must exist.  Its #anchor, if any, must be one of
the target Markdown file's anchors as GitHub makes them: a heading's text
(without its Markdown: code spans, emphasis and links count by their text)
in lower case, every character that is not a letter, a digit, a space, a
hyphen or an underscore removed, and spaces replaced by hyphens; the
second heading with the same anchor gets "-1" appended, the third "-2";
and any <a name="..."> or id="...".  An anchor into another kind of file
is only checked to be a line (#L12 or #L12-L20).

Usage: links.py FILE...   (from the top of the tree).  Prints a TAP line
per file, with a line "FILE:LINE: ..." per broken link, and exits
non-zero if any link is broken.
"""

import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
                    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
ANCHOR_HTML = re.compile(r"<[a-z]+\b[^>]*?\b(?:name|id)\s*=\s*[\"']([^\"']*)[\"']", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def outside_fences(lines):
    """(index, line) of the lines outside fenced code blocks."""
    fence = None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield i, line


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks, with
    code spans blanked out."""
    return [(i + 1, re.sub(r"(`+)(.+?)\1", lambda c: " " * len(c.group(0)), line))
            for i, line in outside_fences(text.split("\n"))]


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)      # links: their text
    text = re.sub(r"<[^>]+>", "", text)                               # HTML tags
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


anchor_cache = {}


def anchors(path):
    """The anchors of a Markdown file."""
    if path in anchor_cache:
        return anchor_cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = set()
    seen = {}
    lines = text.split("\n")
    for i, line in outside_fences(lines):
        for a in ANCHOR_HTML.finditer(line):
            found.add(a.group(1))
        h = HEADING.match(line)
        title = None
        if h:
            title = h.group(2)
        elif (i + 1 < len(lines) and line.strip() and not line.lstrip().startswith(("|", "-", "*", ">"))
              and SETEXT.match(lines[i + 1]) and (i == 0 or not lines[i - 1].strip())):
            title = line.strip()
        if title is None:
            continue
        s = slug(title)
        if s in seen:
            seen[s] += 1
            found.add("%s-%d" % (s, seen[s]))
        else:
            seen[s] = 0
            found.add(s)
    anchor_cache[path] = found
    return found


def links(path):
    """(line number, target) of the links of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = []
    for n, line in prose_lines(text):
        for m in INLINE.finditer(line):
            out.append((n, m.group(1)))
        m = REFDEF.match(line)
        if m:
            out.append((n, m.group(1)))
        for m in HTML.finditer(line):
            out.append((n, m.group(1)))
    return [(n, t[1:-1] if t.startswith("<") and t.endswith(">") else t) for n, t in out]


def broken(path, top, found):
    """The problems of the links found in path."""
    problems = []
    for n, target in found:
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        file_part, _, anchor = target.partition("#")
        file_part = urllib.parse.unquote(file_part.split("?")[0])
        anchor = urllib.parse.unquote(anchor)
        if file_part == "":
            dest = path
        elif file_part.startswith("/"):
            dest = os.path.normpath(os.path.join(top, file_part.lstrip("/")))
        else:
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        where = "%s:%d" % (path, n)
        if os.path.relpath(os.path.abspath(dest), top).startswith(".."):
            problems.append("%s: %s leaves the tree" % (where, target))
            continue
        if not os.path.exists(dest):
            problems.append("%s: %s: there is no %s" % (where, target, dest))
            continue
        if not anchor:
            continue
        if dest.endswith(".md") and os.path.isfile(dest):
            if anchor not in anchors(dest):
                problems.append("%s: %s: %s has no heading with the anchor #%s"
                                % (where, target, dest, anchor))
        elif not re.match(r"^L\d+(-L\d+)?$", anchor):
            problems.append("%s: %s: #%s is not a line of %s" % (where, target, anchor, dest))
    return problems


def main(paths):
    top = os.getcwd()
    n = failed = total = 0
    for path in paths:
        path = os.path.normpath(path)
        n += 1
        found = links(path)
        count = len(found)
        total += count
        problems = broken(path, top, found)
        if problems:
            failed += 1
            print("not ok %d - %s: %d of its %d links broken" % (n, path, len(problems), count))
            for p in problems:
                print("# " + p)
        else:
            print("ok %d - %s: %d link%s, all resolve" % (n, path, count, "" if count == 1 else "s"))
    print("# %d links in %d files checked; %d files with broken links" % (total, n, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
