"""Just enough of Go's text/template (+ the sprig functions the chart uses) to render it.

Helm itself cannot be installed here, so the chart's templates are rendered by this
subset and the output checked as Kubernetes objects. Anything outside the subset raises,
so a template that uses more fails loudly instead of rendering wrongly.
Supported: {{ }} with -trim, if/else/end, define/end, include, pipelines, parentheses,
.Values/.Release/.Chart paths, ``.Files.Get "path"`` (a file of the chart outside templates/;
a missing one raises here, where Helm would render ""), string/number/bool literals, and
quote, nindent, indent, toYaml, default, and, or, not, eq, contains, omit.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_TOKEN = re.compile(r"{{(-?)\s*(.*?)\s*(-?)}}", re.S)


class TemplateError(Exception):
    pass


def _lex(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        literal = text[pos:m.start()]
        if m.group(1):
            literal = literal.rstrip()
        if out and out[-1][0] == "trim_next":
            out.pop()
            literal = literal.lstrip()
        out.append(("text", literal))
        body = m.group(2)
        if not body.startswith("/*"):
            out.append(("action", body))
        if m.group(3):
            out.append(("trim_next", ""))
        pos = m.end()
    tail = text[pos:]
    if out and out[-1][0] == "trim_next":
        out.pop()
        tail = tail.lstrip()
    out.append(("text", tail))
    return out


def _parse(tokens: list[tuple[str, str]], i: int, stop: tuple[str, ...]) -> tuple[list, int, str]:
    nodes: list = []
    while i < len(tokens):
        kind, body = tokens[i]
        if kind == "text":
            nodes.append(("text", body))
            i += 1
            continue
        word = body.split(None, 1)[0] if body else ""
        if word in stop:
            return nodes, i, body
        if word == "if":
            then, i, end = _parse(tokens, i + 1, ("else", "end"))
            other: list = []
            if end.startswith("else"):
                other, i, end = _parse(tokens, i + 1, ("end",))
            nodes.append(("if", body[2:].strip(), then, other))
            i += 1
        elif word == "define":
            inner, i, _ = _parse(tokens, i + 1, ("end",))
            nodes.append(("define", body.split(None, 1)[1].strip().strip('"'), inner))
            i += 1
        elif word in ("range", "with", "template", "block"):
            raise TemplateError(f"unsupported action {word!r}")
        else:
            nodes.append(("expr", body))
            i += 1
    if stop:
        raise TemplateError(f"missing {stop}")
    return nodes, i, ""


def _split_pipeline(expr: str) -> list[str]:
    parts, depth, quote, cur = [], 0, False, ""
    for ch in expr:
        if ch == '"':
            quote = not quote
        if not quote:
            depth += ch == "("
            depth -= ch == ")"
            if ch == "|" and depth == 0:
                parts.append(cur.strip())
                cur = ""
                continue
        cur += ch
    parts.append(cur.strip())
    return parts


def _args(text: str) -> list[str]:
    out, depth, quote, cur = [], 0, False, ""
    for ch in text:
        if ch == '"':
            quote = not quote
        if not quote:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch.isspace() and depth == 0:
                if cur:
                    out.append(cur)
                cur = ""
                continue
        cur += ch
    if cur:
        out.append(cur)
    return out


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=False).rstrip("\n") if value else "{}"


class Renderer:
    def __init__(self, root: dict[str, Any], files: dict[str, str] | None = None) -> None:
        self.root = root
        self.files = files or {}
        self.defines: dict[str, list] = {}

    def _value(self, token: str, dot: Any) -> Any:
        if token.startswith("(") and token.endswith(")"):
            return self.eval(token[1:-1], dot)
        if token.startswith('"'):
            return token[1:-1]
        if token in ("true", "false"):
            return token == "true"
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if token == ".":
            return dot
        if token.startswith("."):
            node = dot
            for part in token[1:].split("."):
                node = node.get(part) if isinstance(node, dict) else None
            return node
        raise TemplateError(f"unsupported operand {token!r}")

    def _call(self, name: str, args: list[Any]) -> Any:
        if name == "include":
            return self.render_nodes(self.defines[args[0]], args[1])
        if name == "quote":
            return '"' + str("" if args[0] is None else args[0]).replace("\\", "\\\\").replace('"', '\\"') + '"'
        if name in ("nindent", "indent"):
            pad = " " * args[0]
            body = "\n".join(pad + line if line else line for line in str(args[1]).split("\n"))
            return "\n" + body if name == "nindent" else body
        if name == "toYaml":
            return _to_yaml(args[0])
        if name == "default":
            return args[1] if args[1] not in (None, "", False, 0, [], {}) else args[0]
        if name == "and":
            return all(args) and args[-1]
        if name == "or":
            return next((a for a in args if a), args[-1])
        if name == "not":
            return not args[0]
        if name == "eq":
            return args[0] == args[1]
        if name == "contains":
            return str(args[0]) in str(args[1])
        if name == "omit":  # sprig: a copy of the dict without the named keys
            return {k: v for k, v in (args[0] or {}).items() if k not in args[1:]}
        if name == ".Files.Get":
            if args[0] not in self.files:
                raise TemplateError(f".Files.Get {args[0]!r}: no such file in the chart")
            return self.files[args[0]]
        raise TemplateError(f"unsupported function {name!r}")

    def eval(self, expr: str, dot: Any) -> Any:
        result: Any = None
        for n, stage in enumerate(_split_pipeline(expr)):
            words = _args(stage)
            head, rest = words[0], words[1:]
            if head == ".Files.Get":
                result = self._call(head, [self._value(w, dot) for w in rest])
                continue
            if head[0] in '.("' or head in ("true", "false") or re.fullmatch(r"-?\d+", head):
                if rest or n:
                    raise TemplateError(f"cannot apply {head!r} in {expr!r}")
                result = self._value(head, dot)
                continue
            args = [self._value(w, dot) for w in rest]
            if n:
                args.append(result)
            result = self._call(head, args)
        return result

    def collect(self, nodes: list) -> None:
        for node in nodes:
            if node[0] == "define":
                self.defines[node[1]] = node[2]

    def render_nodes(self, nodes: list, dot: Any) -> str:
        out = []
        for node in nodes:
            if node[0] == "text":
                out.append(node[1])
            elif node[0] == "expr":
                value = self.eval(node[1], dot)
                out.append("" if value is None else (str(value).lower() if isinstance(value, bool) else str(value)))
            elif node[0] == "if":
                out.append(self.render_nodes(node[2] if self.eval(node[1], dot) else node[3], dot))
        return "".join(out)


def render_chart(files: dict[str, str], values: dict[str, Any], release: str, chart: dict[str, Any],
                 chart_files: dict[str, str] | None = None) -> dict[str, str]:
    """Render every template (name -> text); helpers (``_*.tpl``) only define. ``chart_files``:
    the chart's other files by path relative to the chart (what ``.Files.Get`` reads).
    """
    renderer = Renderer({}, chart_files)
    parsed = {}
    for name, text in files.items():
        nodes, _, _ = _parse(_lex(text), 0, ())
        renderer.collect(nodes)
        parsed[name] = nodes
    dot = {"Values": values, "Release": {"Name": release, "Namespace": "default"},
           "Chart": {"Name": chart["name"], "AppVersion": chart["appVersion"], "Version": chart["version"]}}
    return {name: renderer.render_nodes([n for n in nodes if n[0] != "define"], dot)
            for name, nodes in parsed.items() if not name.startswith("_")}
