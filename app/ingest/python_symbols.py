"""Python symbols and references through the standard library's ast."""

from __future__ import annotations

import ast

from app.ingest.code_model import CodeReference, Symbol


def python_symbols(content: str) -> tuple[list[Symbol], list[CodeReference]]:
    """Classes, functions and methods of a Python file, and the module-level references (raises SyntaxError)."""
    tree = ast.parse(content)
    symbols: list[Symbol] = []
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
                    Symbol(node.name, "class", parent, start, end, body_start, refs, bool(members))
                )
                visit(node.body, node.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "method" if parent else "function"
                symbols.append(
                    Symbol(node.name, kind, parent, start, end, None, calls_in(node, skip_nested=False))
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
