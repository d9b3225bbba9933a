"""Swift, TypeScript/JavaScript and Go symbols and references through tree-sitter."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

from app.ingest.code_model import CodeReference, Symbol


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


def tree_sitter_symbols(content: str, language: str) -> tuple[list[Symbol], list[CodeReference]]:
    """Types, functions and methods of a Swift, TypeScript/JavaScript or Go file, and its imports."""
    src = content.encode()
    root = _parser(language).parse(src).root_node
    if root.has_error and not root.children:
        raise SyntaxError("unparseable")
    symbols: list[Symbol] = []

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
                    Symbol(name, kind, parent, start, child.end_point[0], body_start, refs, bool(members))
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
                        Symbol(
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
