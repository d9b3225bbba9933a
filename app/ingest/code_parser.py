"""Source code into symbol-level chunks with declared and referenced names (no I/O)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from app.ingest.paths import detect_language

REFERENCE_KINDS = ("calls", "inherits", "conforms", "extends", "imports")


@dataclass(frozen=True, slots=True)
class CodeReference:
    """A name a chunk refers to, and how."""

    name: str
    kind: str
    line: int


@dataclass(frozen=True, slots=True)
class CodeChunk:
    """A symbol-level piece of a source file (1-based inclusive lines)."""

    symbol: str | None
    symbol_kind: str
    parent_symbol: str | None
    start_line: int
    end_line: int
    content: str
    declared: tuple[str, ...]
    references: tuple[CodeReference, ...]


@dataclass(slots=True)
class _Symbol:
    name: str
    kind: str
    parent: str | None
    start: int  # 0-based line
    end: int  # 0-based inclusive
    body_start: int | None = None  # first member line of a type, for header chunks
    refs: list[CodeReference] = field(default_factory=list)
    nested_members: bool = False


def split_identifier(name: str) -> list[str]:
    """authenticateUser -> [authenticate, user]; HTTPClient -> [http, client]; snake_case too."""
    parts: list[str] = []
    for chunk in re.split(r"[^A-Za-z0-9]+", name):
        parts.extend(re.findall(r"[A-Z]+(?=[A-Z][a-z]|\d|\b)|[A-Z]?[a-z]+|[A-Z]+|\d+", chunk))
    return [p.lower() for p in parts if p]


# --- Python (stdlib ast) -------------------------------------------------------------------


def _python_symbols(content: str) -> tuple[list[_Symbol], list[CodeReference]]:
    tree = ast.parse(content)
    symbols: list[_Symbol] = []
    module_refs: list[CodeReference] = []

    def call_name(node: ast.Call) -> str | None:
        func = node.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
        return None

    def calls_in(node: ast.AST, skip_nested: bool) -> list[CodeReference]:
        refs = []
        stack = list(ast.iter_child_nodes(node))
        while stack:
            child = stack.pop()
            if skip_nested and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if isinstance(child, ast.Call) and (name := call_name(child)):
                refs.append(CodeReference(name, "calls", child.lineno))
            stack.extend(ast.iter_child_nodes(child))
        return refs

    def base_name(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, ast.Attribute):
            return expr.attr
        if isinstance(expr, ast.Subscript):
            return base_name(expr.value)
        return None

    def visit(body: list[ast.stmt], parent: str | None) -> None:
        for node in body:
            end = (node.end_lineno or node.lineno) - 1
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
            if isinstance(node, ast.ClassDef):
                refs = [
                    CodeReference(name, "inherits", b.lineno)
                    for b in node.bases
                    if (name := base_name(b)) is not None
                ]
                members = [
                    n
                    for n in node.body
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                ]
                body_start = members[0].lineno - 1 if members else None
                refs.extend(calls_in(node, skip_nested=True))
                symbols.append(
                    _Symbol(node.name, "class", parent, start, end, body_start, refs, bool(members))
                )
                visit(node.body, node.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "method" if parent else "function"
                symbols.append(
                    _Symbol(node.name, kind, parent, start, end, None, calls_in(node, skip_nested=False))
                )
            elif parent is None and isinstance(node, ast.Import):
                module_refs.extend(CodeReference(a.name, "imports", node.lineno) for a in node.names)
            elif parent is None and isinstance(node, ast.ImportFrom):
                module_refs.append(
                    CodeReference("." * node.level + (node.module or ""), "imports", node.lineno)
                )
            elif parent is None:
                module_refs.extend(calls_in(node, skip_nested=True))
                if isinstance(node, ast.Expr | ast.Assign) and isinstance(
                    getattr(node, "value", None), ast.Call
                ):
                    call = node.value
                    assert isinstance(call, ast.Call)
                    if (name := call_name(call)) is not None:
                        module_refs.append(CodeReference(name, "calls", call.lineno))

    visit(tree.body, None)
    return symbols, module_refs


# --- tree-sitter languages -----------------------------------------------------------------


@lru_cache(maxsize=8)
def _parser(language: str) -> Any:
    import tree_sitter

    grammar: object
    if language == "swift":
        import tree_sitter_swift

        grammar = tree_sitter_swift.language()
    elif language == "go":
        import tree_sitter_go

        grammar = tree_sitter_go.language()
    else:
        import tree_sitter_typescript

        grammar = tree_sitter_typescript.language_tsx()
    return tree_sitter.Parser(tree_sitter.Language(grammar))


def _text(node: Any, src: bytes) -> str:
    return src[node.start_byte : node.end_byte].decode("utf-8", errors="replace")


def _descendants(node: Any, stop: Callable[[Any], bool] | None = None) -> Iterator[Any]:
    stack = list(reversed(node.children))
    while stack:
        child = stack.pop()
        yield child
        if stop is not None and stop(child):
            continue
        stack.extend(reversed(child.children))


def _first_named(node: Any, *types: str) -> Any | None:
    for child in node.children:
        if child.type in types:
            return child
    return None


def _callee(node: Any, src: bytes, language: str) -> str | None:
    """The called name of a call expression: the last identifier of `a.b.c(...)`."""
    if language == "swift":
        suffix = _first_named(node, "call_suffix")
        # tree-sitter-swift parses subscripts (`tokens[user]`) as calls too; only () and {} call.
        if suffix is None or _text(suffix, src)[:1] not in ("(", "{"):
            return None
    target = (
        node.child_by_field_name("function")
        if language != "swift"
        else (node.children[0] if node.children else None)
    )
    if target is None:
        return None
    idents = [
        n
        for n in [target, *_descendants(target)]
        if n.type
        in ("simple_identifier", "identifier", "property_identifier", "field_identifier", "type_identifier")
    ]
    return _text(idents[-1], src) if idents else None


_SWIFT_FUNCS = ("function_declaration", "init_declaration", "deinit_declaration")
_TS_FUNCS = ("function_declaration", "generator_function_declaration", "method_definition")
_GO_FUNCS = ("function_declaration", "method_declaration")


def _is_function(node: Any, language: str) -> bool:
    if language == "swift":
        return node.type in _SWIFT_FUNCS
    if language == "go":
        return node.type in _GO_FUNCS
    return node.type in _TS_FUNCS or _arrow_name(node) is not None


def _arrow_name(node: Any) -> Any | None:
    """`const login = (…) => …` declares a function named login."""
    if node.type != "variable_declarator":
        return None
    value = node.child_by_field_name("value")
    if value is not None and value.type in ("arrow_function", "function_expression", "function"):
        return node.child_by_field_name("name")
    return None


def _calls(node: Any, src: bytes, language: str, *, skip_functions: bool) -> list[CodeReference]:
    def stop(n: Any) -> bool:
        return skip_functions and (_is_function(n, language) or _is_type(n, language))

    refs = []
    for child in _descendants(node, stop):
        if stop(child):
            continue
        if child.type == "call_expression" and (name := _callee(child, src, language)):
            refs.append(CodeReference(name, "calls", child.start_point[0] + 1))
    return refs


def _is_type(node: Any, language: str) -> bool:
    kind: str = node.type
    if language == "swift":
        return kind in ("class_declaration", "protocol_declaration")
    if language == "go":
        return kind == "type_spec"
    return kind in (
        "class_declaration",
        "abstract_class_declaration",
        "interface_declaration",
        "enum_declaration",
        "type_alias_declaration",
    )


def _swift_type(node: Any, src: bytes) -> tuple[str, str, list[CodeReference]] | None:
    # Modifiers (final, public, @MainActor) come before the keyword that says what this is.
    keyword = next(
        (c.type for c in node.children if c.type in ("class", "struct", "enum", "extension", "actor")), ""
    )
    line = node.start_point[0] + 1
    if node.type == "protocol_declaration":
        kind = "protocol"
    elif keyword in ("class", "struct", "enum", "extension", "actor"):
        kind = "class" if keyword == "actor" else keyword
    else:
        return None
    name_node = _first_named(node, "type_identifier", "user_type")
    if name_node is None:
        return None
    name = _text(name_node, src).split("<")[0].strip()
    refs: list[CodeReference] = []
    if kind == "extension":
        refs.append(CodeReference(name, "extends", line))
    for spec in (c for c in node.children if c.type == "inheritance_specifier"):
        supertype = _text(spec, src).split("<")[0].strip()
        relation = "inherits" if kind in ("class", "protocol") else "conforms"
        refs.append(CodeReference(supertype, relation, spec.start_point[0] + 1))
    return name, kind, refs


def _ts_type(node: Any, src: bytes) -> tuple[str, str, list[CodeReference]] | None:
    name_node = node.child_by_field_name("name")
    if name_node is None:
        return None
    kind = {
        "class_declaration": "class",
        "abstract_class_declaration": "class",
        "interface_declaration": "interface",
        "enum_declaration": "enum",
        "type_alias_declaration": "type",
    }[node.type]
    refs: list[CodeReference] = []
    for child in _descendants(node, lambda n: n.type in ("class_body", "interface_body", "object_type")):
        if child.type in ("extends_clause", "extends_type_clause", "implements_clause"):
            relation = "conforms" if child.type == "implements_clause" else "inherits"
            for ident in (c for c in _descendants(child) if c.type in ("identifier", "type_identifier")):
                refs.append(CodeReference(_text(ident, src), relation, ident.start_point[0] + 1))
    return _text(name_node, src), kind, refs


def _go_type(node: Any, src: bytes) -> tuple[str, str, list[CodeReference]] | None:
    name_node = node.child_by_field_name("name")
    type_node = node.child_by_field_name("type")
    if name_node is None or type_node is None:
        return None
    kind = {"struct_type": "struct", "interface_type": "interface"}.get(type_node.type, "type")
    refs = []
    if kind == "interface":
        for child in type_node.children:
            if child.type in ("type_elem", "constraint_elem", "type_identifier"):
                refs.append(CodeReference(_text(child, src), "inherits", child.start_point[0] + 1))
    return _text(name_node, src), kind, refs


def _function_name(node: Any, src: bytes, language: str) -> str | None:
    if language == "swift":
        if node.type == "init_declaration":
            return "init"
        if node.type == "deinit_declaration":
            return "deinit"
        ident = _first_named(node, "simple_identifier")
        return _text(ident, src) if ident is not None else None
    arrow = _arrow_name(node)
    if arrow is not None:
        return _text(arrow, src)
    name_node = node.child_by_field_name("name")
    return _text(name_node, src) if name_node is not None else None


def _go_receiver(node: Any, src: bytes) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    idents = [c for c in _descendants(receiver) if c.type == "type_identifier"]
    return _text(idents[-1], src) if idents else None


def _imports(root: Any, src: bytes, language: str) -> list[CodeReference]:
    refs = []
    for node in _descendants(root, lambda n: _is_function(n, language) or _is_type(n, language)):
        line = node.start_point[0] + 1
        if language == "swift" and node.type == "import_declaration":
            ident = _first_named(node, "identifier")
            if ident is not None:
                refs.append(CodeReference(_text(ident, src), "imports", line))
        elif language == "go" and node.type == "import_spec":
            path = node.child_by_field_name("path")
            if path is not None:
                refs.append(CodeReference(_text(path, src).strip('"`'), "imports", line))
        elif language in ("typescript", "javascript") and node.type == "import_statement":
            source = node.child_by_field_name("source")
            if source is not None:
                refs.append(CodeReference(_text(source, src).strip("'\"`"), "imports", line))
    return refs


def _tree_sitter_symbols(content: str, language: str) -> tuple[list[_Symbol], list[CodeReference]]:
    src = content.encode()
    root = _parser(language).parse(src).root_node
    if root.has_error and not root.children:
        raise SyntaxError("unparseable")
    symbols: list[_Symbol] = []

    def visit(node: Any, parent: str | None) -> None:
        for child in node.children:
            if _is_type(child, language):
                info = (
                    _swift_type(child, src)
                    if language == "swift"
                    else _go_type(child, src)
                    if language == "go"
                    else _ts_type(child, src)
                )
                if info is None:
                    visit(child, parent)
                    continue
                name, kind, refs = info
                start = (
                    child.parent.start_point[0]
                    if language == "go" and child.parent is not None
                    else child.start_point[0]
                )
                members = [d for d in _descendants(child) if _is_function(d, language)]
                body_start = min((m.start_point[0] for m in members), default=None)
                refs.extend(_calls(child, src, language, skip_functions=True))
                symbols.append(
                    _Symbol(name, kind, parent, start, child.end_point[0], body_start, refs, bool(members))
                )
                visit(child, name)
            elif _is_function(child, language):
                function_name = _function_name(child, src, language)
                owner = _go_receiver(child, src) if language == "go" else parent
                node_for_range = (
                    child.parent if _arrow_name(child) is not None and child.parent is not None else child
                )
                if function_name is not None:
                    kind = "method" if owner else "function"
                    refs = _calls(child, src, language, skip_functions=False)
                    symbols.append(
                        _Symbol(
                            function_name,
                            kind,
                            owner,
                            node_for_range.start_point[0],
                            node_for_range.end_point[0],
                            None,
                            refs,
                        )
                    )
                else:
                    visit(child, parent)
            else:
                visit(child, parent)

    visit(root, None)
    module_refs = _imports(root, src, language)
    covered = {line for s in symbols for line in range(s.start, s.end + 1)}
    module_refs.extend(
        r for r in _calls(root, src, language, skip_functions=True) if r.line - 1 not in covered
    )
    return symbols, module_refs


# --- chunks -------------------------------------------------------------------------------


def _dedupe(refs: list[CodeReference], own: str | None) -> tuple[CodeReference, ...]:
    seen: dict[tuple[str, str], CodeReference] = {}
    for ref in sorted(refs, key=lambda r: r.line):
        if ref.kind == "calls" and ref.name == own:
            continue  # a method calling a same-named method elsewhere is not useful as self-reference
        seen.setdefault((ref.name, ref.kind), ref)
    return tuple(seen.values())


def _windows(start: int, end: int, size: int, overlap: int) -> Iterator[tuple[int, int]]:
    step = max(1, size - overlap)
    first = start
    while True:
        last = min(end, first + size - 1)
        yield first, last
        if last >= end:
            return
        first += step


def _slice(lines: list[str], start: int, end: int) -> str:
    return "\n".join(lines[start : end + 1])


def _fallback_chunks(lines: list[str], max_lines: int, overlap: int) -> list[CodeChunk]:
    chunks = []
    for start, end in _windows(0, len(lines) - 1, max_lines, overlap):
        text = _slice(lines, start, end)
        if text.strip():
            chunks.append(CodeChunk(None, "module", None, start + 1, end + 1, text, (), ()))
    return chunks


_COMMENT_PREFIXES = ("///", "//", "/*", "*", "#", "@")


def _attach_leading_comments(symbols: list[_Symbol], lines: list[str]) -> None:
    """A doc comment (or attribute) right above a declaration belongs to its chunk."""
    starts = {s.start for s in symbols}
    for sym in symbols:
        while sym.start > 0 and (sym.start - 1) not in starts:
            above = lines[sym.start - 1].strip()
            if not above.startswith(_COMMENT_PREFIXES):
                break
            sym.start -= 1


def parse_code(
    path: str, content: str, *, max_chunk_lines: int = 120, overlap_lines: int = 15
) -> list[CodeChunk]:
    """Chunks at symbol boundaries; never raises (broken input falls back to line windows)."""
    lines = content.split("\n")
    if not content.strip():
        return []
    language = detect_language(path)
    try:
        if language == "python":
            symbols, module_refs = _python_symbols(content)
        elif language is not None:
            symbols, module_refs = _tree_sitter_symbols(content, language)
        else:
            return _fallback_chunks(lines, max_chunk_lines, overlap_lines)
    except (SyntaxError, ValueError, RecursionError):
        return _fallback_chunks(lines, max_chunk_lines, overlap_lines)

    _attach_leading_comments(symbols, lines)
    chunks: list[CodeChunk] = []
    covered: set[int] = set()
    for sym in symbols:
        is_type = sym.kind not in ("function", "method")
        end = sym.end
        if (
            is_type
            and sym.end - sym.start + 1 > max_chunk_lines
            and sym.body_start is not None
            and sym.body_start > sym.start
        ):
            end = sym.body_start - 1  # a big type: its header, the members have chunks of their own
        declared = (sym.name,)
        for first, last in _windows(sym.start, end, max_chunk_lines, overlap_lines):
            refs = [r for r in sym.refs if r.kind != "calls" or first + 1 <= r.line <= last + 1]
            chunks.append(
                CodeChunk(
                    sym.name,
                    sym.kind,
                    sym.parent,
                    first + 1,
                    last + 1,
                    _slice(lines, first, last),
                    declared,
                    _dedupe(refs, sym.name if sym.kind in ("function", "method") else None),
                )
            )
        covered.update(range(sym.start, sym.end + 1))
    # Lines outside every symbol (imports, top-level code) become module chunks.
    run: list[int] = []
    for index in [*range(len(lines)), len(lines)]:
        if index < len(lines) and index not in covered:
            run.append(index)
            continue
        if run and any(lines[i].strip() for i in run):
            first, last = run[0], run[-1]
            while not lines[first].strip():
                first += 1
            while not lines[last].strip():
                last -= 1
            for start, end in _windows(first, last, max_chunk_lines, overlap_lines):
                refs = [r for r in module_refs if start + 1 <= r.line <= end + 1]
                chunks.append(
                    CodeChunk(
                        None,
                        "module",
                        None,
                        start + 1,
                        end + 1,
                        _slice(lines, start, end),
                        (),
                        _dedupe(refs, None),
                    )
                )
        run = []
    chunks.sort(key=lambda c: (c.start_line, c.end_line, c.symbol or ""))
    return chunks
