#!/usr/bin/env bash
# Ray as a small archive for a GPU machine without network: what `tflabench sweep --ray` needs of a ray
# wheel (the core binaries, the Python driver and worker, the dashboard agent the raylet starts), without
# the Java jars, the dashboard's web client, the libraries (rllib, tune, train, serve, data, llm) and the
# debug symbols. The archive unpacks into a folder that goes on PYTHONPATH (scripts/ray_gpu_slice.sh).
#
#   scripts/slim_ray_wheel.sh .whl/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl .whl/ray-slim.tar.xz
set -euo pipefail
wheel=$(realpath "$1")
archive=$(realpath -m "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$work"
unzip -q "$wheel"
rm -rf ray/jars ray/rllib ray/tune ray/train ray/serve ray/data ray/llm ray/workflow \
    ray/dashboard/client/build
find ray -name "tests" -type d -prune -exec rm -rf {} +
find ray -name "__pycache__" -type d -prune -exec rm -rf {} +
strip --strip-unneeded ray/_raylet.so ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet
XZ_OPT=-9 tar -cJf "$archive" ray ray-*.dist-info
ls -l "$archive"
