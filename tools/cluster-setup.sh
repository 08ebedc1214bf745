#!/bin/bash
# The notebooks' environment on a cluster login node, from the cluster's own PyTorch: no root,
# nothing downloaded that the cluster already has.
#
#     bash tools/cluster-setup.sh [DIR]        (or: make cluster-env [DIR=...])
#
# - Roihu (CSC): `module load python-pytorch`, then a venv with --system-site-packages, as CSC's
#   Python usage guide and Jupyter page say (CSCfi/csc-user-guide:
#   docs/support/tutorials/python-usage-guide.md, docs/computing/webinterface/jupyter.md).
#   Build it on roihu-gpu.csc.fi: the GPU nodes are aarch64 (docs/computing/systems-roihu.md).
# - LUMI: a venv inside the LUMI AI Factory container with --system-site-packages, as the LUMI
#   AI Guide extends the container (Lumi-supercomputer/LUMI-AI-Guide, 02-setting-up-environment).
# - Elsewhere: load your site's PyTorch first (or set PYTORCH_MODULE=name); the same venv on top.
#
# DIR defaults to the project's application directory when SBATCH_ACCOUNT names the project
# (/projappl/<project>/$USER on Roihu, /project/<project>/$USER on LUMI): home is small on both.
# Then it adds only what is missing to run and check the notebooks, registers the Jupyter
# kernel "ddp-tutorial" and says what it did. A second run changes nothing and says so.
# Overrides: CLUSTER=roihu|lumi|other, PYTORCH_MODULE, SIF (LUMI's image), KERNEL_NAME.
set -uo pipefail

kernel=${KERNEL_NAME:-ddp-tutorial}
arch=$(uname -m)
did=()  # what this run changed, for the summary

die() { echo "error: $*" >&2; exit 1; }
say() { echo "cluster-setup: $*"; }

# A full disk (or quota) gets one line that names the place, whatever step hit it.
full_check() {  # $1: a log of the failed step, $2: where it was writing, $3...: what to do
    if grep -qiE "No space left on device|Disk quota exceeded|errno 28|errno 122" "$1"; then
        die "no space left in $2 ($(df -h --output=avail "$2" 2>/dev/null | tail -1 | tr -d ' ') free):" \
            "${*:3}"
    fi
}

# --- which site --------------------------------------------------------------------------
if ! type module >/dev/null 2>&1; then
    for init in "${LMOD_PKG:-/nonexistent}/init/bash" /usr/share/lmod/lmod/init/bash; do
        # shellcheck disable=SC1090
        [ -r "$init" ] && { source "$init"; break; }
    done
fi
# (Lmod and Environment Modules both list `module -t avail NAME` on stderr, one name a line)
has_module() { type module >/dev/null 2>&1 && module -t avail "$1" 2>&1 | grep -q "^$1\(/\|(\|\$\)"; }

site=${CLUSTER:-}
if [ -z "$site" ]; then
    case $(hostname -f 2>/dev/null || hostname) in
        *roihu*) site=roihu ;;
        uan*|*lumi*) site=lumi ;;
        *) if [ -d /appl/local/laifs ]; then site=lumi
           elif has_module python-pytorch; then site=roihu  # CSC's module name (and the practice cluster's)
           else site=other; fi ;;
    esac
fi
case $site in
    roihu) module_name=${PYTORCH_MODULE:-python-pytorch}; where=/projappl ;;
    lumi)  module_name=${PYTORCH_MODULE:-}; where=/project ;;
    other) module_name=${PYTORCH_MODULE:-}; where= ;;
    *) die "CLUSTER=$site: give roihu, lumi or other" ;;
esac
say "site: $site ($(hostname), $arch)"

# --- the cluster's PyTorch ---------------------------------------------------------------
run_py=()  # how to start the base Python (LUMI: inside the container)
if [ "$site" = roihu ]; then
    case $(hostname) in *roihu*) [ "$arch" = aarch64 ] || die "this is an $arch login node; Roihu's" \
        "GPU nodes are aarch64: log in to roihu-gpu.csc.fi and run this there (a venv built here would" \
        "not run on them)";; esac
    has_module "$module_name" || die "Roihu needs the $module_name module and it is not available here" \
        "('module load $module_name' failed): run this on roihu-gpu.csc.fi, or set PYTORCH_MODULE"
    module load "$module_name" 2>/dev/null || die "'module load $module_name' failed"
    run_py=(python3)
elif [ "$site" = lumi ]; then
    module use /appl/local/laifs/modules 2>/dev/null
    has_module lumi-aif-singularity-bindings || die "LUMI needs the lumi-aif-singularity-bindings module" \
        "(module use /appl/local/laifs/modules) and it is not available here"
    module load lumi-aif-singularity-bindings 2>/dev/null || die "'module load lumi-aif-singularity-bindings' failed"
    # the image CSC's and LUMI's examples name for torch 2.10 (t210), unless SIF says otherwise
    sif=${SIF:-$(find /appl/local/laifs/containers -path '*t210*' -name 'lumi-multitorch-full-*.sif' 2>/dev/null | sort | tail -1)}
    [ -e "${sif:-/nonexistent}" ] || die "no LUMI AI Factory image: set SIF=/appl/local/laifs/containers/.../lumi-multitorch-full-...sif"
    run_py=(singularity exec "$sif" python3)
else
    if [ -n "$module_name" ]; then
        has_module "$module_name" || die "module $module_name (PYTORCH_MODULE) is not available here"
        module load "$module_name" 2>/dev/null || die "'module load $module_name' failed"
    fi
    run_py=(python3)
fi
# (its metadata: importing torch takes seconds on a busy login node)
torch_version=$("${run_py[@]}" -c 'from importlib.metadata import version; print(version("torch"))' 2>/dev/null) ||
    die "no PyTorch in the base Python ($("${run_py[@]}" -c 'import sys; print(sys.executable)' 2>/dev/null || echo "no python3")):" \
        "load your site's PyTorch module first (PYTORCH_MODULE=name) or pass CLUSTER=roihu|lumi"
base=${module_name:+module $module_name}
[ "$site" = lumi ] && base="container $sif"
say "PyTorch $torch_version from ${base:-$(command -v python3)}"

# --- where the environment goes ----------------------------------------------------------
dir=${1:-${DIR:-}}
if [ -z "$dir" ]; then
    project=${SBATCH_ACCOUNT:-}
    if [ -n "$where" ] && [ -n "$project" ] && [ -d "$where/$project" ]; then
        dir=$where/$project/$USER/ddp-tutorial-venv-$arch
    else
        die "give a directory for the environment, e.g. bash tools/cluster-setup.sh" \
            "${where:-/path/to/project/software}/project_<number>/\$USER/ddp-tutorial-venv-$arch" \
            "(or export SBATCH_ACCOUNT=project_<number> first; home is too small)"
    fi
fi
mkdir -p "$(dirname "$dir")" 2>/dev/null || die "cannot create $(dirname "$dir"): choose a directory you can write to"
dir=$(cd "$(dirname "$dir")" && pwd)/$(basename "$dir")
log=$(mktemp)
trap 'rm -f "$log"' EXIT

stamp="$dir/.ddp-tutorial"  # what the venv was built on
want="site=$site arch=$arch base=${module_name:-}${sif:-} torch=$torch_version"
if [ -x "$dir/bin/python" ]; then
    [ -f "$stamp" ] || die "$dir exists and was not made by this setup: choose another directory"
    have=$(cat "$stamp")
    [ "$have" = "$want" ] || die "$dir was built for '$have', this is '$want':" \
        "use another directory (the venv runs only where it was built)"
    say "venv $dir: already there"
else
    # No pip of its own: the module's pip installs into the venv too (ensurepip below if none).
    if ! "${run_py[@]}" -m venv --system-site-packages --without-pip "$dir" >"$log" 2>&1; then
        full_check "$log" "$dir" "free some space there, or give another directory"; cat "$log" >&2; die "python3 -m venv $dir failed"
    fi
    # The module's Python may be a venv itself (the practice cluster's is): --system-site-packages
    # then reaches only the Python below it. A .pth file adds the module's own packages.
    base_paths=$("${run_py[@]}" -c 'import site, sys; print("\n".join(site.getsitepackages()) if sys.prefix != sys.base_prefix else "")')
    if [ -n "$base_paths" ]; then
        sp=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$base_paths" >"$sp/_base_module_packages.pth"
    fi
    echo "$want" >"$stamp" || { die "cannot write $stamp"; }
    did+=("made the venv $dir (--system-site-packages, on ${base:-python3})")
fi
py=("$dir/bin/python")
[ "$site" = lumi ] && py=(singularity exec "$sif" "$dir/bin/python")
"${py[@]}" -c 'from importlib.metadata import version; version("torch")' 2>/dev/null || die "the venv $dir does not see the module's torch"

# --- what the notebooks need that the module lacks ---------------------------------------
# import name:pip name. torch and numpy stay the module's (constrained to its versions).
needs=(ipykernel:ipykernel nbval:nbval pytest:pytest sklearn:scikit-learn matplotlib:matplotlib
       jupyterlab:jupyterlab deepspeed:deepspeed lightning:lightning accelerate:accelerate)
# find_spec looks without importing (DeepSpeed and Lightning take seconds to import).
read -r -a missing <<<"$("${py[@]}" -c 'import importlib.util as u, sys
print(" ".join(p for i, p in (n.split(":") for n in sys.argv[1:]) if u.find_spec(i) is None))' "${needs[@]}")"
if [ ${#missing[@]} -gt 0 ]; then
    pins=$(mktemp)
    "${py[@]}" -c 'from importlib.metadata import version as v; print(f"torch=={v(\"torch\")}\nnumpy=={v(\"numpy\")}")' >"$pins"
    say "installing what the module lacks: ${missing[*]}"
    "${py[@]}" -c 'import pip' 2>/dev/null || "${py[@]}" -m ensurepip -q >"$log" 2>&1 ||
        { full_check "$log" "$dir" "free some space there, or give another directory"; die "no pip in $dir (python -m ensurepip failed)"; }
    if ! "${py[@]}" -m pip install --no-cache-dir -q -c "$pins" "${missing[@]}" >"$log" 2>&1; then
        full_check "$log" "$dir" "free some space there, or give another directory"; tail -5 "$log" >&2; rm -f "$pins"
        die "pip install ${missing[*]} failed (above); the login node needs internet access for it"
    fi
    rm -f "$pins"
    did+=("installed ${missing[*]}")
else
    say "packages: the ${base%% *} has everything the notebooks need"
fi

# --- the Jupyter kernel ------------------------------------------------------------------
# A small launcher loads the cluster's software first, so the kernel (and the jobs it submits)
# see what a login shell with the module sees.
launcher="$dir/bin/ddp-tutorial-kernel"
{
    echo '#!/bin/bash'
    echo "# Jupyter kernel of the DDP tutorial, written by tools/cluster-setup.sh ($site)."
    if [ "$site" != other ] || [ -n "$module_name" ]; then
        # shellcheck disable=SC2016  # written as it is, expanded when the kernel starts
        echo 'type module >/dev/null 2>&1 || source "${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash"'
    fi
    if [ "$site" = roihu ] || { [ "$site" = other ] && [ -n "$module_name" ]; }; then
        echo "module load $module_name"
        echo "exec $dir/bin/python -m ipykernel_launcher \"\$@\""
    elif [ "$site" = lumi ]; then
        echo 'module use /appl/local/laifs/modules; module load lumi-aif-singularity-bindings'
        echo "exec singularity exec $sif $dir/bin/python -m ipykernel_launcher \"\$@\""
    else
        echo "exec $dir/bin/python -m ipykernel_launcher \"\$@\""
    fi
} >"$log.k"
if ! cmp -s "$log.k" "$launcher"; then
    if ! { cp "$log.k" "$launcher" && chmod +x "$launcher"; } 2>"$log"; then
        full_check "$log" "$dir" "free some space there, or give another directory"; die "cannot write $launcher"
    fi
    did+=("wrote the kernel launcher $launcher")
fi
rm -f "$log.k"
kdir=${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter}/kernels/$kernel
label=${module_name:-python3}
[ "$site" = lumi ] && label="AI Factory $(basename "$sif" .sif)"
spec=$(printf '{\n "argv": ["%s", "-f", "{connection_file}"],\n "display_name": "Python (%s, %s)",\n "language": "python",\n "metadata": {"debugger": false}\n}' \
       "$launcher" "$kernel" "$label")
if [ "$(cat "$kdir/kernel.json" 2>/dev/null)" != "$spec" ]; then
    if ! { mkdir -p "$kdir" && printf '%s\n' "$spec" >"$kdir/kernel.json"; } 2>"$log"; then
        full_check "$log" "$HOME" "your home directory is full: free some space (CSC: 'lue \$HOME'," \
            "LUMI: 'lumi-quota'), or register the kernel elsewhere with JUPYTER_DATA_DIR=$dir/share/jupyter"
        grep -q . "$log" && cat "$log" >&2
        die "cannot register the kernel in $kdir (is your home directory full? 'df -h ~')"
    fi
    did+=("registered the Jupyter kernel '$kernel' ($kdir)")
fi

# --- what happened -----------------------------------------------------------------------
if [ ${#did[@]} -eq 0 ]; then
    say "nothing to do: $dir is ready and the kernel '$kernel' is registered"
else
    for d in "${did[@]}"; do say "$d"; done
fi
echo "Open the notebooks with the kernel '$kernel' (Jupyter: Kernel > Change kernel)."
echo "Check one from a shell: LOCAL_SLURM=off ${py[*]} -m pytest -o addopts= --nbval \\"
echo "    --nbval-kernel-name $kernel --nbval-sanitize-with tests/sanitize.cfg notebooks/01-ddp.ipynb"
echo "On a real cluster first: export SBATCH_ACCOUNT=project_<number>"
