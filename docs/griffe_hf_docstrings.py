"""A griffe extension for the API reference (`mkdocs.yml`: the python handler's `extensions`): reads transformers-style
argument entries as Google-style ones.

transformers writes `name (`type`, *optional*, defaults to 16):`, which the Google parser takes whole as the type
(shown raw). This keeps the first backticked type as the type and moves what else the parentheses say (a shape, when it
is returned) to the front of the description; `*optional*` and the default are dropped, since the signature shows them.
A reference written [`Name`] becomes `Name`.
"""

import re

import griffe


REFERENCE = re.compile(r"\[(`[\w.]+`)\]")  # transformers' [`NDRModelOutput`]: a link in its docs, plain code here
ENTRY = re.compile(r"^(?P<indent>\s+)(?P<name>\*{0,2}\w+) \((?P<inside>`[^`]+`.*?)\):(?P<rest>.*)$")


def simplify(line: str) -> str:
    """One docstring line, rewritten if it opens a transformers-style argument entry."""
    match = ENTRY.match(line)
    if match is None:
        return line
    inside = match["inside"]
    type_name = inside[1 : inside.index("`", 1)]
    details = inside[len(type_name) + 2 :]
    details = re.sub(r"\*optional\*", "", details)
    details = re.sub(r"defaults to .*$", "", details).strip(" ,")
    rest = match["rest"]
    if details:
        rest = f" ({details}){rest}" if rest.strip() else f" ({details})"
    return f"{match['indent']}{match['name']} ({type_name}):{rest}"


class HFDocstrings(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            lines = REFERENCE.sub(r"\1", obj.docstring.value).split("\n")
            obj.docstring.value = "\n".join(simplify(line) for line in lines)
