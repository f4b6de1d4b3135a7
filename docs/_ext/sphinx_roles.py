"""A griffe extension for depthtraj's site: the docstrings cross-reference with Sphinx roles
(``:func:`~depthtraj.store.open_store```, ``:class:`Table```), which Markdown would show as
typed. Each role becomes an inline code span wrapped in an *optional* autorefs link: it links
to the object's entry in the API reference when that object is rendered (full paths as given;
a relative name is tried against the enclosing module), and stays plain code when it is not
(a private helper), so an unrendered target never fails the strict build.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(func|meth|class|attr|data|mod|exc|obj):`(~?)([^`<>]+?)`")


def _replace(text: str, module: str) -> str:
    def one(m: re.Match) -> str:
        short, target = m.group(2) == "~", m.group(3).strip().rstrip("()")
        shown = target.rsplit(".", 1)[-1] if short else target
        full = target if target.startswith("depthtraj") else f"{module}.{target}"
        return f'<autoref identifier="{full}" optional><code>{shown}</code></autoref>'

    return ROLE.sub(one, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring griffe loads (see the module docstring)."""

    def on_instance(self, *, node, obj, agent, **kwargs) -> None:
        if obj.docstring is not None and ":`" in obj.docstring.value:
            module = obj.module.path if not obj.is_module else obj.path
            obj.docstring.value = _replace(obj.docstring.value, module)
