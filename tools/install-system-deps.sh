#!/bin/bash
# Debian packages the tests need: a real Slurm (controller, node daemon, clients, accounting
# daemon with its MariaDB database, the lua job-submit plugin), munge, dnsmasq (the practice
# cluster's DNS), Lmod, iproute2 for the network namespaces, shellcheck, and chromium for the
# browser checks. Installs only what is missing; needs root (or sudo).
set -euo pipefail
declare -A need=(
  [slurmctld]=slurmctld [slurmd]=slurmd [sbatch]=slurm-client [slurmdbd]=slurmdbd
  [mariadbd]=mariadb-server [dnsmasq]=dnsmasq-base [munged]=munge [ip]=iproute2
  [shellcheck]=shellcheck [chromium]=chromium
)
missing=()
for bin in "${!need[@]}"; do
  PATH="$PATH:/usr/sbin:/sbin" command -v "$bin" >/dev/null || missing+=("${need[$bin]}")
done
[ -e /usr/share/lmod/lmod/init/bash ] || missing+=(lmod)
compgen -G "/usr/lib/*/slurm-wlm/job_submit_lua.so" >/dev/null || missing+=(slurm-wlm-basic-plugins)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "installing Debian packages: ${missing[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
