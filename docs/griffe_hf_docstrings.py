"""A griffe extension for the API reference (`mkdocs.yml`: the python handler's `extensions`): reads transformers-style
argument entries as Google-style ones.

A method decorated with transformers' `@auto_docstring` (the models' `forward`) has its docstring written when the
module is imported: the standard arguments (`input_ids`, `attention_mask`, `labels`, `output_*`) from transformers'
own texts, ours from `NDR_FORWARD_ARGS`, the returns from the output class. griffe reads the source, which holds none
of it, so for such a method the docstring is taken from the imported function.

transformers writes `name (`type`, *optional*, defaults to 16):`, which the Google parser takes whole as the type
(shown raw). This keeps the first backticked type as the type and moves what else the parentheses say (a shape, when it
is returned) to the front of the description; `*optional*` and the default are dropped, since the signature shows them.
A reference written [`Name`] becomes `Name`.
"""

import importlib
import inspect
import re

import griffe


REFERENCE = re.compile(r"\[(`[\w.]+`)\]")  # transformers' [`NDRModelOutput`]: a link in its docs, plain code here
# auto_docstring's links into transformers' own docs, relative there
GLOSSARY = re.compile(r"\]\(\.\./glossary")
RETURNS = re.compile(r"^(Returns:\n    )(.+?)\n(?=\n)", re.DOTALL | re.MULTILINE)
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


def runtime_docstring(function) -> str | None:
    """The docstring `@auto_docstring` wrote for a griffe `Function`, read from the imported module; None for other
    functions."""
    if not any(decorator.callable_path.endswith(".auto_docstring") for decorator in function.decorators):
        return None
    owner = importlib.import_module(function.module.path)
    for name in function.path[len(function.module.path) + 1 :].split("."):
        owner = getattr(owner, name)
    # auto_docstring cannot find the config class of a model outside transformers
    text = inspect.cleandoc(owner.__doc__).replace("configuration ([`None`])", "configuration")
    # its Returns paragraph is one item wrapped over lines, which the Google parser would read as one item per line
    return RETURNS.sub(lambda match: match[1] + " ".join(match[2].split()) + "\n", text)


class HFDocstrings(griffe.Extension):
    def on_instance(self, *, obj, agent, **kwargs):
        if obj.is_function and (written := runtime_docstring(obj)) is not None:
            # parsed as griffe parses the docstrings it reads itself (the handler's docstring_style)
            obj.docstring = griffe.Docstring(
                written, parent=obj, parser=agent.docstring_parser, parser_options=agent.docstring_options
            )
        if obj.docstring is not None:
            text = GLOSSARY.sub("](https://huggingface.co/docs/transformers/glossary", obj.docstring.value)
            lines = REFERENCE.sub(r"\1", text).split("\n")
            obj.docstring.value = "\n".join(simplify(line) for line in lines)
