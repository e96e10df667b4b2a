#!/usr/bin/env bash
# Regeneration latency: the time of an incremental release build after touching one machine description.
# Usage: scripts/bench-regen.sh [targets/NAME.isa]   (default: targets/systolic-os.isa)
set -euo pipefail
cd "$(dirname "$0")/.."
spec="${1:-targets/systolic-os.isa}"
cargo build --release -q -p tessera
touch "$spec"
start=$(date +%s.%N)
cargo build --release -q -p tessera
end=$(date +%s.%N)
echo "incremental release build after touching $spec: $(echo "$end - $start" | bc) s"
