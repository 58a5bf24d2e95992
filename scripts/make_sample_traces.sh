#!/usr/bin/env bash
# Regenerate every study in sample_traces/ from scratch.
#   usage: scripts/make_sample_traces.sh BIN_DIR      (make sample-traces passes .venv/bin)
# BIN_DIR must hold a python with tracescale and torch==2.13.0 (the 'capture' extra).
# The real CPU studies are timings of this machine: rerunning changes their numbers.
set -euo pipefail

BIN="${1:-.venv/bin}"
BIN="$(cd "$BIN" && pwd)"
cd "$(dirname "$0")/.."

if [ -x "$BIN/tracescale" ] && "$BIN/tracescale" sweep --help >/dev/null 2>&1; then
    SWEEP=("$BIN/tracescale" sweep)
else  # before the sweep command is wired into the main CLI group
    SWEEP=("$BIN/python" -m tracescale.cli.sweep)
fi

for mode in strong weak; do
    out="sample_traces/ddp_cpu_$mode"
    rm -rf "$out"
    "${SWEEP[@]}" --nproc 1,2,4 --out "$out" --timeout 600 -- \
        examples/ddp_cpu.py --scaling "$mode" --steps 7
done

if [ -x "$BIN/tracescale" ] && "$BIN/tracescale" simulate --help >/dev/null 2>&1; then
    rm -rf sample_traces/sim_gpu_strong
    "$BIN/tracescale" simulate --world-sizes 1,2,4,8 --steps 5 --seed 0 \
        --out sample_traces/sim_gpu_strong
else
    echo "make_sample_traces: 'tracescale simulate' not available; kept sample_traces/sim_gpu_strong" >&2
fi

du -sh sample_traces/*/ >&2
