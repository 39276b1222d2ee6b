#!/usr/bin/env bash
# Fuzzes each target in turn (one process at a time), then minimizes its corpus.
#   usage: fuzz/run.sh SECONDS [TARGET...]     (default: every target in fuzz_targets/)
# Logs go to fuzz/logs/<target>.log (ignored by git); a crash stops that target and leaves the
# input under fuzz/artifacts/<target>/: copy it to fuzz/regressions/<target>/ and fix the parser.
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:?seconds per target}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=($(cd fuzz_targets && ls *.rs | sed 's/\.rs$//'))
mkdir -p logs
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    # -a: debug assertions and overflow checks, as in the debug builds the issue is about.
    cargo +nightly fuzz run -a "$t" "corpus/$t" -- \
        -max_total_time="$secs" -max_len=65536 -timeout=10 -print_final_stats=1 \
        > "logs/$t.log" 2>&1
    echo "$t: exit $? $(grep -E '^stat::number_of_executed_units' "logs/$t.log") $(grep -E '#[0-9]+ *(DONE|pulse|NEW|REDUCE)' "logs/$t.log" | tail -1)"
done
