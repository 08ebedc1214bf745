"""`<!-- account NN -->`, before a step's batch scripts: how to give your project number, what its
jobs' Python must import (read from the scripts slurm/NN-*.sbatch run) and how to add it."""
import re

from .markers import block_marker

ACCOUNT = block_marker(r"account ([\w-]+)")  # groups: indentation, step

# What a step's jobs import beyond torch and numpy (which every script needs: ddp_helpers), read
# from the scripts its batch files run: import name -> package name.
PACKAGES = {"sklearn": "scikit-learn", "deepspeed": "deepspeed", "lightning": "lightning",
            "accelerate": "accelerate"}
CSC = "https://docs.csc.fi"
LAIF = "https://github.com/lumi-ai-factory/laifs-container-recipes/blob/main/recipes/lumi-multitorch"
LUMI_AI_GUIDE = "https://github.com/Lumi-supercomputer/LUMI-AI-Guide/tree/main/02-setting-up-environment"


def step_needs(root, key, page=None):
    """(the step's Roihu batch file, its scripts, the packages they need beyond torch and numpy).
    The batch file named like the page (slurm/11-debugging.sbatch for 11-debugging.md) is the one
    to show, else the shortest Roihu one."""
    files = sorted(root.glob(f"slurm/{key}-*.sbatch")) + sorted(root.glob(f"slurm/{key}.sbatch"))
    if not files:
        raise ValueError(f"no batch script slurm/{key}-*.sbatch")
    default = next((f for f in files if f.stem == page), None) or min(
        (f for f in files if not re.search(r"-(lumi|generic|launcher)$", f.stem)), key=lambda f: len(f.name))
    scripts = sorted({s for f in files if not f.stem.endswith("-generic")
                      for s in re.findall(r"\bcode/\w+\.py", f.read_text())})
    needs, read, todo = set(), set(), list(scripts)
    while todo:  # the scripts, and the modules of code/ they import (step 13's data_loading.py)
        s = todo.pop()
        if s in read:
            continue
        read.add(s)
        text = (root / s).read_text()
        imported = re.findall(r"^\s*(?:import|from) (\w+)", text, re.M)
        needs |= {PACKAGES[m] for m in imported if m in PACKAGES}
        todo += [f"code/{m}.py" for m in imported if (root / "code" / f"{m}.py").exists()]
        if re.search(r"(?<!def )\bload_dataset\(", text):  # the digits: the file scikit-learn ships
            needs.add("scikit-learn")
    return default.relative_to(root).as_posix(), scripts, sorted(needs)


def account(root, key, page=None):
    """The box before a step's batch scripts: the reader's project, and what the job's Python
    must provide (read from the scripts) and how to add what is missing."""
    sbatch, scripts, needs = step_needs(root, key, page)
    imports = ", ".join(["torch", "numpy"] + [{"scikit-learn": "sklearn"}.get(n, n) for n in needs])
    if (root / "docs" / "run-on-your-cluster.md").exists():  # the setup per cluster
        setup = ("`make cluster-env` makes such an environment for you: [Run the notebooks on your "
                 "cluster](run-on-your-cluster.md#1-one-setup-on-a-login-node).")
    else:
        setup = "Each cluster's lines: [Roihu, LUMI and any Slurm site](clusters.md)."
    named = " and ".join(f"`{s}`" for s in scripts)
    what = ["torch", "numpy"] + [f"**{n}**" + (" (the digits data)" if n == "scikit-learn" else "")
                                 for n in needs]
    what = ", ".join(what[:-1]) + " and " + what[-1]
    return f"""!!! info "Before you submit: your project, and what the job's Python needs"

    **Your project.** The scripts name an example project (`project_2001234` on Roihu,
    `project_462000000` on LUMI), which the real clusters refuse ("Invalid account"); on the
    [practice cluster](local-cluster.md) you are a member of both, so they run there. Give yours
    when you submit, or once per shell: sbatch reads `SBATCH_ACCOUNT`, a command-line option wins
    over it, and both win over the `#SBATCH` line (Slurm's
    [sbatch manual](https://slurm.schedmd.com/sbatch.html#SECTION_INPUT-ENVIRONMENT-VARIABLES)).

    ```bash
    sbatch --account=project_<number> {sbatch}
    export SBATCH_ACCOUNT=project_<number>   # or this, once per shell
    ```

    **Python.** This step's jobs run {named}, which import {what}. Check the job's environment
    before a long run:

    ```bash
    module load python-pytorch                 # Roihu
    python -c "import {imports}"
    singularity run "$SIF" python -c "import {imports}"  # LUMI
    ```

    Roihu's `python-pytorch` (PyTorch 2.10) is the module CSC's own DeepSpeed and Lightning
    examples load ([CSC: multi-GPU and multi-node ML]({CSC}/support/tutorials/ml-multi/)); CSC
    does not list its packages, `pip list` shows them ([CSC: PyTorch]({CSC}/apps/pytorch/)).
    LUMI's `lumi-multitorch-full` images add DeepSpeed, Accelerate and Lightning to PyTorch
    ([their recipe's package list]({LAIF}/lumi-multitorch-vars.yaml)); neither names
    scikit-learn.

    ??? note "Add what is missing: a virtual environment on top of the module or container"

        With `--system-site-packages` the environment keeps everything the module or the
        container has and adds only what you install, in the project's application folder
        (Roihu's `/projappl`, LUMI's `/project`; [CSC's Python guide]({CSC}/support/tutorials/python-usage-guide/#installing-python-packages-to-existing-modules);
        [the LUMI AI Guide]({LUMI_AI_GUIDE}) does the same inside the container).
        Roihu's GPU nodes are aarch64 (Grace), its CPU nodes x86-64: make the environment on a
        Roihu-GPU login node or in a short `gputest` job, so that compiled packages match (CSC's
        guide keeps separate user package folders per architecture). {setup}

        ```bash
        # Roihu, once:
        module purge; module load python-pytorch
        python3 -m venv --system-site-packages /projappl/project_<number>/ddp-venv
        /projappl/project_<number>/ddp-venv/bin/pip install scikit-learn  # what is missing
        # in the batch script, after `module load python-pytorch`:
        source /projappl/project_<number>/ddp-venv/bin/activate

        # LUMI, once (SIF as in the batch script):
        singularity exec "$SIF" bash -c 'python -m venv --system-site-packages \\
            /project/project_<number>/ddp-venv &&
            /project/project_<number>/ddp-venv/bin/pip install scikit-learn'
        # in the batch script, the training command inside the container becomes:
        #   singularity run "$SIF" bash -c \\
        #     'source /project/project_<number>/ddp-venv/bin/activate && python ...'
        ```"""
