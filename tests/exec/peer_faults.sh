#!/bin/bash
# A peer that dies or hangs mid-run (execute, calibrate): the launch ends non-zero within the
# timeout, with a clear message, instead of hanging. A run that fails on one rank alone ends every
# rank at once, that rank saying why. Usage: peer_faults.sh DOMINO MPIEXEC SOURCE_DIR
set -uo pipefail
domino=$1 mpiexec=$2 src=$3
flags=(--model "$src/models/examples/tiny-gpt.yaml" --cluster dgx-h100:1:2 --tp 2 --seq-len 16
       --micro-batch 12 --timeout 3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# execute counts ops, calibrate measurements (its compute ops come first: the survivor then
# waits in the first collective).
for command in execute calibrate; do
  extra=()
  [[ $command == calibrate ]] && extra=(--out "$tmp/profile.yaml" --repeats 1)
  for fault in hang die fail; do
    start=$(date +%s)
    out=$(DOMINO_FAULT_INJECT="$fault@1:20" timeout 60 "$mpiexec" -np 2 --oversubscribe \
          -x DOMINO_FAULT_INJECT "$domino" "$command" "${flags[@]}" "${extra[@]}" 2>&1)
    rc=$?
    took=$(($(date +%s) - start))
    ((rc != 0)) || fail "$command $fault: the launch succeeded"
    ((rc != 124)) || fail "$command $fault: still running after 60 s"
    ((took <= 30)) || fail "$command $fault: took $took s"
    [[ ! -e $tmp/profile.yaml ]] || fail "$command $fault: wrote a profile"
    if [[ $fault == fail ]]; then
      grep -q "^domino $command: rank 1: injected failure after 20 [a-z]*$" <<<"$out" ||
        fail "$command fail: the failed rank did not say why: $out"
      ! grep -q "no progress for" <<<"$out" || fail "$command fail: waited for the watchdog: $out"
    elif [[ $fault == hang ]]; then
      grep -q "^domino $command: rank [0-9]*: no progress for [0-9]* s after [0-9]* [a-z]*; a peer" \
        <<<"$out" || fail "$command hang: no clear message: $out"
    else
      # Either the launcher names the dead rank, or (if it is slower than --timeout) the
      # survivor's watchdog says a peer died.
      grep -q "Exit code: *9\|no progress for [0-9]* s after [0-9]* [a-z]*; a peer" <<<"$out" ||
        fail "$command die: nobody named the dead rank: $out"
    fi
    echo "ok $command $fault: exit $rc after $took s"
  done
done
# A whole 3D step (pipeline and DP ranks wait on each other's sends): a hung rank still ends the
# launch within the timeout.
start=$(date +%s)
out=$(DOMINO_FAULT_INJECT="hang@1:3" timeout 60 "$mpiexec" -np 4 --oversubscribe \
      -x DOMINO_FAULT_INJECT "$domino" execute --model "$src/models/examples/tiny-gpt.yaml" \
      --cluster dgx-h100:1:4 --tp 1 --pp 2 --dp 2 --seq-len 16 --micro-batch 4 --global-batch 16 \
      --timeout 3 2>&1)
rc=$?
took=$(($(date +%s) - start))
((rc != 0 && rc != 124)) || fail "3D step hang: exit $rc"
((took <= 30)) || fail "3D step hang: took $took s"
grep -q "no progress for [0-9]* s after [0-9]* ops; a peer" <<<"$out" ||
  fail "3D step hang: no clear message: $out"
echo "ok 3D step hang: exit $rc after $took s"
echo "peer faults ok"
