# shellcheck shell=bash
# Sourced by the device commands (scripts/gpu_grid.sh, gpu_checks.sh, gpu_reproduce.sh), in the repository
# root: installs the offline peer wheels of wheels/ (fla-core, mlstm-kernels; git-ignored, carried to the
# device) into /tmp/site unless an earlier command on the same machine did (several commands may share one,
# one per GPU), and puts /tmp/site and the checkout on PYTHONPATH. Exits the sourcing script when the
# install fails.
[[ -d /tmp/site/fla ]] || python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
