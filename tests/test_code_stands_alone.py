"""A reader copies code/ and slurm/ to their cluster, and nothing else of this repository: every
script a batch file runs must import only the standard library, installed packages and modules of
code/ itself, and no script may put a folder other than its own on sys.path.

Checked on a copy, without running the scripts: each import statement is read from the source
(recursively through the modules of code/ they import), and the names that are not in code/ are
looked up by one Python that sees only the copy's code/ and the installed packages.
"""
import ast
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run by a Python started with -I (no PYTHONPATH, no current folder on sys.path): the copy's
# code/ first, as for a script started from it, then the standard library and site-packages.
# Only top-level names: find_spec("torch") finds the package without importing it.
FIND = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
found = {}
for name in json.loads(sys.argv[2]):
    spec = importlib.util.find_spec(name)
    found[name] = None if spec is None else (spec.origin or "namespace package")
print(json.dumps(found))
"""


def copy_of_code_and_slurm(tmp_path):
    for folder in ("code", "slurm"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "code"


def scripts_batch_files_run(copy):
    """The code/*.py files named anywhere in the copy's batch files."""
    return sorted({name for f in (copy.parent / "slurm").rglob("*.sbatch")
                   for name in re.findall(r"\bcode/([\w-]+\.py)\b", f.read_text())})


def imported_names(path):
    """The top-level module names a file imports (anywhere in it, lazy imports included);
    "." for a relative import, which a script outside a package cannot make."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module.split(".")[0] if node.level == 0 else ".")
    return names


def local_module(code, name):
    """code/NAME.py or the package code/NAME/, which shadows any installed module of that name."""
    for candidate in (code / f"{name}.py", code / name / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def sys_path_entries(tree):
    """The expressions a file adds to sys.path: sys.path.insert/append/extend(...), sys.path = ...,
    sys.path[...] = ..., sys.path += ..."""
    def is_sys_path(node):
        return (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id == "sys")

    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and is_sys_path(node.func.value) and node.func.attr in ("insert", "append", "extend")):
            yield node.args[-1]
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(is_sys_path(t.value if isinstance(t, ast.Subscript) else t) for t in targets):
                yield node.value


def folders(expr, script):
    """What `expr` evaluates to in `script` (its __file__ set), as a list of resolved folders;
    None when the expression needs more than __file__, os and pathlib to evaluate."""
    try:
        value = eval(compile(ast.Expression(expr), str(script), "eval"),
                     {"__file__": str(script), "os": os, "Path": Path, "pathlib": pathlib})
    except Exception:
        return None
    values = value if isinstance(value, (list, tuple)) else [value]
    return [Path(v).resolve() for v in values]


def test_every_script_a_batch_file_runs_imports_only_installed_modules_and_code(tmp_path):
    code = copy_of_code_and_slurm(tmp_path)
    scripts = scripts_batch_files_run(code)
    assert len(scripts) >= 25, scripts  # the parse found the batch files' scripts
    missing = [s for s in scripts if not (code / s).exists()]
    assert not missing, f"batch files run scripts that code/ lacks: {missing}"

    # every local module a script reaches, and every other name imported on the way (by whom)
    outside, seen, todo = {}, set(), [code / s for s in scripts]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imported_names(path):
            local = local_module(code, name) if name != "." else None
            if local is not None:
                todo.append(local)
            else:
                outside.setdefault(name, []).append(path.name)
    assert "ddp_helpers.py" in {p.name for p in seen}  # the walk went into code/'s own modules

    r = subprocess.run([sys.executable, "-I", "-c", FIND, str(code), json.dumps(sorted(outside))],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    assert found["torch"] and found["os"]  # the lookup sees site-packages and the standard library
    venv = Path(sys.prefix).resolve()  # (it may live inside the repository)

    def from_repository(origin):  # (a built-in module's origin is "built-in")
        parents = Path(origin).resolve().parents if os.path.isabs(origin) else []
        return ROOT in parents and venv not in parents

    bad = [f"{', '.join(sorted(set(outside[name])))}: import {name} -> "
           f"{'not found' if origin is None else origin}"
           for name, origin in sorted(found.items()) if origin is None or from_repository(origin)]
    assert not bad, "imports a copy of code/ and slurm/ cannot satisfy:\n" + "\n".join(bad)


def test_no_script_puts_a_folder_outside_its_own_on_sys_path(tmp_path):
    code = copy_of_code_and_slurm(tmp_path)
    bad = []
    for script in sorted(code.glob("*.py")):
        for expr in sys_path_entries(ast.parse(script.read_text(), str(script))):
            where = folders(expr, script)
            if where is None or any(f != code for f in where):
                bad.append(f"{script.name}:{expr.lineno}: sys.path gets {ast.unparse(expr)}"
                           f" = {where or 'something this test cannot evaluate'}")
    assert not bad, "scripts that reach outside code/:\n" + "\n".join(bad)
