"""Every tensor a collective sees is on the script's device: a static check of code/*.py.

NCCL has a backend for CUDA tensors only: `dist.all_reduce` of a CPU tensor in an nccl group stops
the run with `RuntimeError: No backend type associated with device type cpu`. On CPU (gloo) the
same line runs, since the script's device is the CPU, so no CPU run can show the mistake. This
reads the source instead (no torch, milliseconds): for each tensor given to a collective it follows
the name back to where the tensor was made, in the same function (else the module), and fails
where it was made on the CPU whatever the script chose:

- a factory without `device=` (`torch.tensor(...)`, `torch.zeros(...)`, in a list or not), or with
  `device="cpu"`; `torch.from_numpy`;
- `.cpu()` or `.to("cpu")`.

A tensor made from another (`.sum()`, `[i]`, `zeros_like(x)`, `.to(device)`, `.cuda()`) is where
that one is; a tensor from the model, the data or a parameter is not followed further. A
collective in a group made with `dist.new_group(backend="gloo")` takes CPU tensors by design.

    python tests/test_device_check.py FILE...   # the same check on other files (exit 1: problems)
"""
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "broadcast", "reduce", "gather", "scatter", "send", "recv", "isend", "irecv", "all_to_all",
               "all_to_all_single", "P2POp"}
NOT_TENSORS = {"op", "group", "src", "dst", "async_op", "tag", "group_src", "group_dst", "peer", "group_peer"}
FACTORIES = {"tensor", "as_tensor", "asarray", "zeros", "ones", "empty", "full", "arange", "linspace", "logspace",
             "rand", "randn", "randint", "randperm", "eye", "empty_strided", "scalar_tensor"}
LIKE = {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}


def is_cpu(node):
    """`"cpu"` or `torch.device("cpu")` (or "cpu:0")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":")[0] == "cpu"
    return (isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.device" and node.args
            and is_cpu(node.args[0]))


class Scopes(ast.NodeVisitor):
    """{scope node: {name: [(line, value or None)]}}: the assignments of each function and of the
    module (a name bound without a value we can follow, a parameter or a loop variable: None)."""

    def __init__(self, tree):
        self.binds, self.parent, self.stack = {}, {}, [tree]
        self.binds[tree] = {}
        self.generic_visit(tree)

    def bind(self, target, value, line):
        if isinstance(target, ast.Name):
            self.binds[self.stack[-1]].setdefault(target.id, []).append((line, value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and \
                len(value.elts) == len(target.elts) else [None] * len(target.elts)
            for t, v in zip(target.elts, values):
                self.bind(t, v, line)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, None, line)

    def visit_FunctionDef(self, node):
        self.binds[node] = {}
        self.parent[node] = self.stack[-1]
        self.stack.append(node)
        for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]:
            if a is not None:
                self.binds[node].setdefault(a.arg, []).append((node.lineno, None))
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        for t in node.targets:
            self.bind(t, node.value, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self.bind(node.target, node.value, node.lineno)
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        self.bind(node.target, node.value, node.lineno)
        self.generic_visit(node)

    def visit_For(self, node):
        self.bind(node.target, None, node.lineno)
        self.generic_visit(node)

    def visit_With(self, node):
        for item in node.items:
            if item.optional_vars is not None:
                self.bind(item.optional_vars, None, node.lineno)
        self.generic_visit(node)

    def lookup(self, scope, name, line):
        """The values `name` may hold at `line`: its last assignment before it in the innermost
        scope that binds it (none before: every assignment there, a loop's later one)."""
        while scope is not None:
            found = self.binds[scope].get(name)
            if found:
                before = [b for b in found if b[0] < line]
                return [max(before, key=lambda b: b[0])[1]] if before else [v for _, v in found]
            scope, line = self.parent.get(scope), float("inf")  # a global: any of its assignments
        return [None]


def origins(node, scopes, scope, line, depth=0):
    """Where the tensor `node` is made: a set of reasons it is on the CPU (empty: on the device,
    or not something this check follows)."""
    if node is None or depth > 30:
        return set()
    again = lambda n, ln=line: origins(n, scopes, scope, ln, depth + 1)  # noqa: E731
    if isinstance(node, ast.Name):
        out = set()
        for value in scopes.lookup(scope, node.id, line):
            out |= origins(value, scopes, scope, getattr(value, "lineno", line), depth + 1)
        return out
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return set().union(*map(again, node.elts)) if node.elts else set()
    if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return again(node.elt)
    if isinstance(node, (ast.Subscript, ast.Starred)):
        return again(node.value)
    if isinstance(node, ast.BinOp):
        return again(node.left) | again(node.right)
    if isinstance(node, ast.IfExp):
        return again(node.body) | again(node.orelse)
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return set()  # a function's result (the model's output, a loss): not followed
    func, text = node.func, ast.unparse(node)
    device = next((k.value for k in node.keywords if k.arg == "device"), None)
    if isinstance(func.value, ast.Name) and func.value.id == "torch":
        if func.attr in ("from_numpy", "frombuffer"):
            return {f"{text}: made on the CPU"}
        if func.attr in FACTORIES | LIKE and device is not None:
            return {f"{text}: device= is the CPU"} if is_cpu(device) else set()
        if func.attr in FACTORIES:
            return {f"{text}: no device=, so on the CPU"}
        if func.attr in LIKE:
            return again(node.args[0]) if node.args else set()
        if func.attr in ("stack", "cat", "concat"):
            return again(node.args[0]) if node.args else set()
        return set()
    if func.attr == "cpu":
        return {f"{text}: moved to the CPU"}
    if func.attr == "cuda":
        return set()
    if func.attr == "to":
        where = [a for a in node.args if not ast.unparse(a).startswith("torch.")  # torch.float64: a dtype
                 or ast.unparse(a).startswith("torch.device")] + \
                ([device] if device is not None else [])
        if any(is_cpu(a) for a in where):
            return {f"{text}: moved to the CPU"}
        return set() if where else again(func.value)  # .to(dtype) keeps the device
    if func.attr in ("numpy", "item", "tolist"):
        return set()
    return again(func.value)  # a method of a tensor: where that tensor is


def check_source(source, name="<source>"):
    """['file:line: dist.X(...): why'] for every tensor argument of a collective made on the CPU."""
    tree = ast.parse(source)
    scopes = Scopes(tree)
    problems = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and \
                    child.func.attr in COLLECTIVES and ast.unparse(child.func.value) in ("dist", "torch.distributed"):
                group = next((k.value for k in child.keywords if k.arg == "group"), None)
                made = [v for v in scopes.lookup(scope, group.id, child.lineno)] if isinstance(group, ast.Name) else []
                if any(isinstance(v, ast.Call) and ast.unparse(v.func).endswith("new_group") and any(
                        k.arg == "backend" and getattr(k.value, "value", None) == "gloo" for k in v.keywords)
                       for v in made):
                    continue  # a gloo group of its own: CPU tensors by design
                args = [*child.args, *(k.value for k in child.keywords if k.arg not in NOT_TENSORS)]
                for arg in args:
                    for why in sorted(origins(arg, scopes, scope, child.lineno)):
                        problems.append(f"{name}:{child.lineno}: {ast.unparse(child.func)}({ast.unparse(arg)}, ...): "
                                        f"{why}")
            visit(child, inner)

    visit(tree, tree)
    return problems


def scripts_with_collectives():
    return [p for p in sorted((ROOT / "code").glob("*.py"))
            if any(f"dist.{c}(" in p.read_text() for c in COLLECTIVES)]


def test_every_collective_gets_tensors_on_the_scripts_device():
    files = scripts_with_collectives()
    assert len(files) >= 10 and ROOT / "code/15_two_dimensions.py" in files, files  # the check reads them
    problems = [p for f in files for p in check_source(f.read_text(), f"code/{f.name}")]
    assert not problems, "\n".join(problems)


# The check's own cases: each line a collective; True: it must be flagged (a CPU tensor in an nccl
# group), False: it must pass. The first three are the mistakes of step 15's first version.
CASES = [
    (True, "sums = [torch.zeros(1, dtype=torch.float64) for _ in range(2)]\ndist.all_gather(sums, x.sum().reshape(1))"),
    (True, "total = torch.tensor([loss.item()], dtype=torch.float64)\ndist.all_reduce(total)"),
    (True, "flags = torch.tensor([ok, True])\nflags[1] *= 0\ndist.all_reduce(flags, op=dist.ReduceOp.MIN)"),
    (True, "t = model.weight.detach().cpu()\ndist.broadcast(t, src=0)"),
    (True, "t = torch.ones(2, device='cpu')\ndist.all_reduce(t[:1])"),
    (True, "t = torch.from_numpy(a)\ndist.all_reduce(t)"),
    (True, "def f(v):\n    t = torch.tensor(v).to(torch.float64)\n    dist.all_reduce(t)"),
    (True, "t = x.to('cpu')\ndist.send(t, dst=1)"),
    (True, "out = torch.empty(4)\ndist.all_gather_into_tensor(out, x)"),
    (False, "sums = [torch.zeros(1, device=device) for _ in range(2)]\ndist.all_gather(sums, x.sum().reshape(1))"),
    (False, "total = torch.tensor([1.0], dtype=torch.float64, device=device)\ndist.all_reduce(total)"),
    (False, "copies = [torch.empty_like(p.to_local()) for _ in range(2)]\ndist.all_gather(copies, p.to_local())"),
    (False, "t = torch.tensor(1.0)\nif nccl:\n    t = t.cuda()\ndist.all_reduce(t)"),
    (False, "t = torch.tensor(1.0).to(device)\ndist.all_reduce(t)"),
    (False, "g = dist.new_group(backend='gloo')\nt = torch.zeros(1)\ndist.all_reduce(t, group=g)"),
    (False, "class A:\n    def forward(ctx, x):\n        x = x.clone()\n        dist.all_reduce(x)\n        return x"),
    (False, "dist.all_gather_object(out, [1, 2])"),
]


def test_the_check_flags_a_cpu_tensor_and_passes_one_on_the_device():
    for bad, source in CASES:
        assert bool(check_source(source)) == bad, (bad, source, check_source(source))


if __name__ == "__main__":
    found = [p for f in sys.argv[1:] for p in check_source(Path(f).read_text(), f)]
    print("\n".join(found) or "no collective gets a CPU tensor")
    sys.exit(1 if found else 0)
