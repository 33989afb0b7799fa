"""No import cycles between rayjet's modules.

Two modules that import each other (directly or through others) can only be understood,
loaded and tested together, and a cycle hidden by a function-level import breaks the day
that import moves. The check is grimp's graph of ``rayjet`` (every import statement,
function-level and ``if TYPE_CHECKING:`` ones included): each strongly connected component
must be a single module. When one is not, the message names a cycle through it and every
import between its modules, with file lines.
"""

from __future__ import annotations

from collections import deque

import grimp


def _components(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _cycle(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, inside the component."""
    members, start = set(component), component[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.find_modules_directly_imported_by(node) & members):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    return component


def _describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    members = set(component)
    imports = sorted(
        (importer, detail["line_number"], detail["line_contents"])
        for importer in component
        for imported in graph.find_modules_directly_imported_by(importer) & members
        for detail in graph.get_import_details(importer=importer, imported=imported))
    return "\n".join([" -> ".join(_cycle(graph, component)),
                      *(f"    {m}:{line}: {text}" for m, line, text in imports)])


def test_no_module_is_in_an_import_cycle():
    graph = grimp.build_graph("rayjet", cache_dir=None)
    components = _components(graph)
    assert not components, "import cycles between rayjet's modules:\n" + "\n".join(
        _describe(graph, c) for c in components)
