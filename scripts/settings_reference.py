"""Writes docs/settings.md, the reference of every service setting, from the settings classes.

    python scripts/settings_reference.py            # rewrite docs/settings.md
    python scripts/settings_reference.py --check    # exit 1 if docs/settings.md differs

Hand-kept tables drift: a field added to a settings class went undocumented (about a third of
them were in no doc). Here the classes are the source: every ``Settings`` subclass is found by
walking the project's packages (not by fixed module paths, so modules may move), each field's
description is the comment block right above it in the class body, and the ``conch up`` flag
that sets a field is found by reading ``conch``'s own code: where a dict entry or item
assignment keyed ``CONCH_...`` gets a value computed from the parsed flags (``args.<dest>``),
followed through local names and through calls into other ``conch`` functions, and the dest
named by ``conch.arguments.parser()``. A field without a description is an error
(tests/unit/test_settings_reference.py fails on it, and on a stale docs/settings.md).

Longer than 300 lines because discovery, descriptions, the flag data flow and rendering are one
pipeline that the test loads from this one file (scripts/ is not a package to split it into).
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import inspect
import io
import sys
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import msgspec

if TYPE_CHECKING:
    # The base is found at run time (by its name and shape, wherever it lives): this class.
    from shared.runtime.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "settings.md"
REGENERATE = "python scripts/settings_reference.py"
# Top-level directories that hold tests or tooling, never a service's settings.
SKIPPED_PACKAGES = frozenset({"tests"})
# The base class: the one named this whose subclasses are the services' settings.
BASE_NAME = "Settings"
# The package whose code turns flags into settings, and the function building its parser.
CLI_PACKAGE = "conch"
CLI_PARSER = ("conch.arguments", "parser")


@dataclass(frozen=True)
class Field:
    """One row of the reference."""

    name: str
    env: str
    type: str
    default: str
    flags: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class Section:
    """One settings class: its env prefix and the fields read under it."""

    title: str
    qualname: str
    prefix: str
    doc: str
    fields: tuple[Field, ...]


class MissingDescriptions(Exception):
    """Fields that have no comment above them (``Class.field`` each)."""

    def __init__(self, fields: list[str]):
        super().__init__("settings without a description comment: " + ", ".join(fields))
        self.fields = fields


# Discovery ------------------------------------------------------------------------------------


def project_packages(root: Path = ROOT) -> list[Path]:
    """Top-level packages of the project: directories at the root with an ``__init__.py``."""
    return sorted(
        path.parent
        for path in root.glob("*/__init__.py")
        if path.parent.name not in SKIPPED_PACKAGES and not path.parent.name.startswith(".")
    )


def _module_name(path: Path, package: Path) -> str:
    """The dotted name of ``path``, a file of the top-level package ``package``."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _base_names(node: ast.ClassDef) -> Iterator[str]:
    for base in node.bases:
        if isinstance(base, ast.Name):
            yield base.id
        elif isinstance(base, ast.Attribute):
            yield base.attr


def candidate_modules(root: Path = ROOT, packages: Iterable[Path] | None = None) -> list[str]:
    """Modules that may define a settings class, found by reading (not importing) every file.

    Importing every module of the project would pull in every optional backend (torch,
    TensorRT...); a module is imported only when a class statement in it names ``Settings``,
    or a class derived from it, among its bases (followed to a fixed point, so a subclass of a
    subclass in another module is found too). The base class's own module is a candidate too.
    Only files that mention one of those names are parsed, which keeps the walk under a second.
    """
    sources = {
        path: package
        for package in (project_packages(root) if packages is None else packages)
        for path in sorted(package.rglob("*.py"))
    }
    texts = {path: path.read_bytes() for path in sources}
    parsed: dict[Path, list[tuple[str, set[str]]]] = {}
    derived = {BASE_NAME}
    modules: set[str] = set()
    changed = True
    while changed:
        changed = False
        for path, text in texts.items():
            if path not in parsed:
                if not any(name.encode() in text for name in derived):
                    continue
                try:
                    tree = ast.parse(text, filename=str(path))
                except SyntaxError:
                    tree = ast.Module(body=[], type_ignores=[])
                parsed[path] = [
                    (node.name, set(_base_names(node)))
                    for node in ast.walk(tree)
                    if isinstance(node, ast.ClassDef)
                ]
            for name, bases in parsed[path]:
                if name == BASE_NAME or bases & derived:
                    modules.add(_module_name(path, sources[path]))
                    if name not in derived:
                        derived.add(name)
                        changed = True
    return sorted(modules)


def base_class(root: Path = ROOT) -> type[Settings]:
    """The ``Settings`` base: a msgspec Struct named so, with ``from_env``, in the project."""
    for module in candidate_modules(root):
        cls = getattr(importlib.import_module(module), BASE_NAME, None)
        if (
            isinstance(cls, type)
            and issubclass(cls, msgspec.Struct)
            and hasattr(cls, "from_env")
            and cls.__module__ == module
        ):
            return cast("type[Settings]", cls)  # found by name and shape, not imported by path
    raise LookupError(f"no {BASE_NAME}(msgspec.Struct) with from_env under {root}")


def settings_classes(
    root: Path = ROOT, packages: Iterable[Path] | None = None
) -> list[type[Settings]]:
    """The base, then every subclass of it (at any depth) defined in the walked packages.

    Subclasses defined elsewhere (a test's, say) are left out, so what is documented does not
    depend on what else the process happened to import.
    """
    base = base_class(root)
    modules = candidate_modules(root, packages)
    for module in modules:
        importlib.import_module(module)
    found: list[type[Settings]] = []
    stack = [base]
    while stack:
        cls = stack.pop()
        if cls not in found:
            found.append(cls)
            stack.extend(cls.__subclasses__())
    kept = [cls for cls in found if cls is not base and cls.__module__ in modules]
    return [base, *sorted(kept, key=_qualname)]


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# Descriptions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Declared:
    """A field as written in a class body."""

    annotation: str
    default_source: str | None
    description: str


def _comment_lines(source: str) -> dict[int, str]:
    """Line number -> text of the comments that stand alone on their line."""
    comments: dict[int, str] = {}
    code_rows: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            if token.start[0] not in code_rows:
                comments[token.start[0]] = token.string
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_rows.update(range(token.start[0], token.end[0] + 1))
    return comments


def _comment_text(lines: list[str]) -> str:
    text = " ".join(line.lstrip("#").strip() for line in lines)
    return " ".join(text.split())


@functools.cache
def declared_fields(cls: type) -> dict[str, _Declared]:
    """The fields written in ``cls``'s own body, each with the comment block right above it.

    The block must touch the field's line (no blank line between): a comment that opens a
    group of fields describes the first of them only, so every field needs its own.
    """
    path = inspect.getsourcefile(cls)
    if path is None:
        return {}
    source = Path(path).read_text()
    comments = _comment_lines(source)
    _, start = inspect.getsourcelines(cls)
    tree = ast.parse(source)
    node = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.ClassDef) and n.name == cls.__name__ and n.lineno >= start
        ),
        None,
    )
    if node is None:
        return {}
    declared: dict[str, _Declared] = {}
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        block: list[str] = []
        row = item.lineno - 1
        while row in comments:
            block.insert(0, comments[row])
            row -= 1
        declared[item.target.id] = _Declared(
            annotation=ast.unparse(item.annotation),
            default_source=None if item.value is None else ast.unparse(item.value),
            description=_comment_text(block),
        )
    return declared


def _declaration(cls: type, name: str) -> _Declared | None:
    """Where a field was last written along the MRO (a subclass may redeclare a default)."""
    for klass in cls.__mro__:
        if klass is object or not (isinstance(klass, type) and issubclass(klass, msgspec.Struct)):
            continue
        found = declared_fields(klass).get(name)
        if found is not None:
            return found
    return None


# Flags ----------------------------------------------------------------------------------------


def _key(node: ast.AST) -> str | None:
    """``name['key']`` for a constant subscript of a local name, the unit tracked per key."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and isinstance(node.slice, ast.Constant)
    ):
        return f"{node.value.id}[{node.slice.value!r}]"
    return None


def _reads(node: ast.AST, args_names: set[str], local: dict[str, set[str]]) -> set[str]:
    """The dests an expression reads: ``args.<dest>``, or through the local names it uses."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in args_names
    ):
        return {node.attr}
    key = _key(node)
    if key is not None and key in local:
        return set(local[key])
    if isinstance(node, ast.Name):
        return set(local.get(node.id, ()))
    found: set[str] = set()
    for child in ast.iter_child_nodes(node):
        found |= _reads(child, args_names, local)
    return found


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


# A function of ``conch``'s code, ``def`` or ``async def``.
_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(trees: list[ast.Module]) -> dict[str, list[_Function]]:
    found: dict[str, list[_Function]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(node.name, []).append(node)
    return found


def _params(function: _Function) -> list[str]:
    spec = function.args
    return [a.arg for a in [*spec.posonlyargs, *spec.args, *spec.kwonlyargs]]


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _namespace_params(function: _Function) -> set[str]:
    """Parameters holding the parsed flags: named ``args`` or annotated ``argparse.Namespace``."""
    spec = function.args
    names = set()
    for arg in [*spec.posonlyargs, *spec.args, *spec.kwonlyargs]:
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if arg.arg == "args" or annotation.endswith("Namespace"):
            names.add(arg.arg)
    return names


def env_flag_dests(trees: list[ast.Module]) -> dict[str, set[str]]:
    """Environment variable -> the parser dests whose values reach it in ``conch``'s code.

    A small data flow over the syntax trees, iterated to a fixed point: a local name depends
    on the dests its assigned expressions read (``strict = str(args.strict_model_config)``);
    a parameter on what the callers pass for it (``plan_edge(url, args.envoy_port)``); an
    environment entry (``{"CONCH_X": value}`` or ``env["CONCH_X"] = value``) on its value.
    """
    functions = _functions(trees)
    depends: dict[int, dict[str, set[str]]] = {}  # id(function) -> name -> dests

    def deps(function: _Function, node: ast.AST) -> set[str]:
        local = depends.setdefault(id(function), {})
        return _reads(node, _namespace_params(function), local)

    def add(function: _Function, name: str, dests: set[str]) -> bool:
        local = depends.setdefault(id(function), {})
        before = local.setdefault(name, set())
        if dests <= before:
            return False
        before |= dests
        return True

    all_functions = [f for group in functions.values() for f in group]
    changed = True
    while changed:
        changed = False
        for function in all_functions:
            for node in ast.walk(function):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    value = deps(function, node.value)
                    for target in targets:
                        for name in _names(target):
                            changed |= add(function, name, value)
                        if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                            # ports = {"xds": ..., "envoy": envoy_port}: each key on its own.
                            for k, v in zip(node.value.keys, node.value.values, strict=True):
                                if isinstance(k, ast.Constant):
                                    key = f"{target.id}[{k.value!r}]"
                                    changed |= add(function, key, deps(function, v))
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    value = deps(function, node.iter)
                    for name in _names(node.target):
                        changed |= add(function, name, value)
                elif isinstance(node, ast.NamedExpr):
                    changed |= add(function, node.target.id, deps(function, node.value))
                elif isinstance(node, ast.Call):
                    for callee in functions.get(_callee(node) or "", []):
                        params = _params(callee)
                        if params and params[0] in ("self", "cls"):
                            params = params[1:]
                        passed = list(zip(params, node.args, strict=False))
                        passed += [(k.arg, k.value) for k in node.keywords if k.arg]
                        for param, expr in passed:
                            changed |= add(callee, param, deps(function, expr))

    result: dict[str, set[str]] = {}
    for function in all_functions:
        for node in ast.walk(function):
            pairs: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, ast.Dict):
                pairs = [(k, v) for k, v in zip(node.keys, node.values, strict=True) if k]
            elif isinstance(node, ast.Assign):
                pairs = [
                    (t.slice, node.value) for t in node.targets if isinstance(t, ast.Subscript)
                ]
            for key_node, value_node in pairs:
                if (
                    isinstance(key_node, ast.Constant)
                    and isinstance(key_node.value, str)
                    and key_node.value.startswith("CONCH_")
                ):
                    result.setdefault(key_node.value, set()).update(deps(function, value_node))
    return result


def _cli_trees(root: Path) -> list[ast.Module]:
    package = root / CLI_PACKAGE
    return [ast.parse(path.read_bytes()) for path in sorted(package.rglob("*.py"))]


def _dest_flags(parser: argparse.ArgumentParser, command: str = "conch") -> dict[str, str]:
    """Parser dest -> ``conch <verb> --flag`` (the first long option string)."""
    flags: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb, sub in action.choices.items():
                for dest, flag in _dest_flags(sub, f"{command} {verb}").items():
                    flags.setdefault(dest, flag)
        elif action.option_strings:
            long = [s for s in action.option_strings if s.startswith("--")]
            flags.setdefault(action.dest, f"{command} {(long or action.option_strings)[0]}")
    return flags


def env_flags(root: Path = ROOT) -> dict[str, tuple[str, ...]]:
    """Environment variable -> the ``conch`` flags that set it (sorted)."""
    module, function = CLI_PARSER
    parser = getattr(importlib.import_module(module), function)()
    dest_flags = _dest_flags(parser)
    return {
        env: tuple(sorted(dest_flags[d] for d in dests if d in dest_flags))
        for env, dests in env_flag_dests(_cli_trees(root)).items()
    }


# Rendering ------------------------------------------------------------------------------------


def _env_name(cls: type[Settings], name: str) -> str:
    """As ``Settings.from_env`` reads it: common fields unprefixed, the rest under the prefix."""
    prefix = "CONCH_" if name in cls.__common__ else cls.__prefix__
    return f"{prefix}{name.upper()}"


def _env_text(value: Any) -> str:
    """A default as it would be written in the environment."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(v) for v in value)
    return str(value)


def _default(field: msgspec.structs.FieldInfo, declared: _Declared | None) -> str:
    if field.default is not msgspec.NODEFAULT:
        value = field.default
    elif field.default_factory is not msgspec.NODEFAULT:
        value = field.default_factory()
    else:
        return "(required)"
    text = _env_text(value)
    shown = f"`{text}`" if text else "(empty)"
    source = declared.default_source if declared else None
    if source and source.replace("_", "") != repr(value) and any(op in source for op in "*+-/"):
        shown += f" ({source})"
    return shown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def sections(classes: list[type[Settings]], flags: dict[str, tuple[str, ...]]) -> list[Section]:
    """One section per class; a subclass omits the common fields it inherits unchanged."""
    base = classes[0]  # settings_classes puts the base first
    missing: list[str] = []
    result = []
    for cls in classes:
        own = declared_fields(cls)
        rows = []
        for info in msgspec.structs.fields(cls):
            if cls is not base and info.name in base.__common__ and info.name not in own:
                continue
            declared = _declaration(cls, info.name)
            description = declared.description if declared else ""
            if not description:
                missing.append(f"{_qualname(cls)}.{info.name}")
            env = _env_name(cls, info.name)
            rows.append(
                Field(
                    name=info.name,
                    env=env,
                    type=declared.annotation if declared else str(info.type),
                    default=_default(info, declared),
                    flags=flags.get(env, ()),
                    description=description,
                )
            )
        # The class's own docstring only: getdoc would repeat the base's under every class.
        doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
        title = (
            "Common to every service" if cls is base else f"{cls.__name__} (`{cls.__prefix__}*`)"
        )
        result.append(
            Section(title, _qualname(cls), cls.__prefix__, doc.split("\n\n")[0], tuple(rows))
        )
    if missing:
        raise MissingDescriptions(missing)
    return result


HEADER = """\
# Settings reference

<!-- Generated by `{command}` from the settings classes;
     do not edit by hand: tests/unit/test_settings_reference.py fails when it is stale. -->

Every service reads its settings from environment variables, once, at start-up
(`Settings.from_env`): the fields of its settings class, each under the service's prefix, and the
common fields under `CONCH_`. Lists are comma-separated; booleans are `true`/`false` (or `1`/`0`).
`conch up` sets some of them from its flags (column *Flag*) and passes the rest of its own
environment through, so any setting here can be given to `conch up` as an environment variable.
Each description is the comment above the field in its class.
"""


def render(found: list[Section]) -> str:
    """The Markdown document (deterministic: classes and fields in a fixed order)."""
    out = [HEADER.format(command=REGENERATE)]
    out.append("| Class | Prefix | Fields |\n|---|---|---|")
    for section in found:
        anchor = _anchor(section.title)
        out.append(
            f"| [`{section.qualname}`](#{anchor}) | `{section.prefix}` | {len(section.fields)} |"
        )
    for section in found:
        out.append(f"\n## {section.title}\n")
        text = f"`{section.qualname}`"
        if section.doc:
            text += f": {' '.join(section.doc.split())}"
        out.append(text + "\n")
        out.append("| Environment variable | Type | Default | Flag | Description |")
        out.append("|---|---|---|---|---|")
        for row in section.fields:
            flag = ", ".join(f"`{f}`" for f in row.flags)
            out.append(
                f"| `{row.env}` | `{_cell(row.type)}` | {_cell(row.default)} | {flag} "
                f"| {_cell(row.description)} |"
            )
    return "\n".join(out) + "\n"


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def generate(root: Path = ROOT) -> str:
    """The reference as it should be checked in (raises MissingDescriptions)."""
    return render(sections(settings_classes(root), env_flags(root)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    try:
        text = generate()
    except MissingDescriptions as exc:
        print(f"settings_reference: {exc}", file=sys.stderr)
        return 1
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
