#!/bin/sh
# train-files.t: what gridlm-train does to the files in --save and --load
# (one process, the tiny model on the CPU, mock data).
#
# 1. Leftovers: temporaries planted in --save as a killed save leaves
#    them are removed at the start, in one line; other names, and a link
#    with a temporary's name (and its target), stay.
# 2. A save stopped midway (GRIDLM_TEST_SAVE_SIGNAL raises the signal
#    after the first tensor, on every rank: no timing involved): SIGKILL
#    leaves its temporary, which the following run removes; SIGTERM (no
#    --exit-signal-handler) removes it at once.  The tracker never moves.
# 3. Links: at the tracker's name (replaced, target untouched), at the
#    names older gridlm versions used for temporaries (untouched), at a
#    checkpoint's name (refused, target untouched).
# 4. --load of a directory with checkpoint files but no readable tracker
#    (missing, dangling link, FIFO) is refused naming the newest complete
#    checkpoint and both ways to resume, and writes nothing.
# 5. --save holding another run's checkpoints beyond where this run
#    starts is refused before training, naming the file.
# 6. --save that cannot be written is refused at the start; a full disk
#    says "No space left on device" with the path and leaves no
#    temporary (both on small tmpfs mounts: skipped where mount fails).
# 7. --load of a checkpoint whose model differs in --rotary-base,
#    --norm-epsilon or --use-rope-scaling is refused naming each field
#    and both values.
: "${top_builddir:=.}"
train="$top_builddir/src/tools/gridlm-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/train-files.XXXXXX") || exit 1
mounts=""
cleanup() {
    for m in $mounts; do umount "$m" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT

. "$(dirname "$0")/model-flags.sh"
tiny="$llama_form --device cpu --mock-data --seed 1234 --num-layers 2 --hidden-size 32
 --num-attention-heads 4 --ffn-hidden-size 64 --seq-length 32 --vocab-size 256
 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-iters 0
 --lr-decay-iters 100"
# (a fixed decay: runs here resume with a longer --train-iters, and the
# schedule, as Megatron's, must then match the checkpoint's)

. "$(dirname "$0")/tap.sh"
# check DESCRIPTION COMMAND...: one result from the command's status
check() {
    what=$1; shift
    "$@"
    ok $? "$what"
}
show() { sed 's/^/#   /' "$1"; }
# run LOG FLAGS...: train (two minutes at most), output in LOG; sets $rc.
# $runenv (VAR=VALUE), when set, is given to this run only.
runenv=
run() {
    log=$1; shift
    # shellcheck disable=SC2086
    env $runenv timeout 120 "$train" $tiny "$@" >"$log" 2>&1
    rc=$?
    runenv=
}
tracker() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null; }
temps() { ls "$1" | grep -c '\.tmp'; }
# stamp DIR: names, sizes and modification times of what DIR holds
stamp() { ls -l --time-style=+%s.%N "$1" | md5sum; }

plan 30

# --- 1. leftovers ---
d="$tmp/ck"
mkdir -p "$d"
echo old >"$d/iter_0000001.h5.tmp.Ab12Cd"
echo old >"$d/latest_checkpointed_iteration.txt.tmp.4242"
echo keep >"$d/notes.tmp.1"
echo precious >"$tmp/victim"
ln -s "$tmp/victim" "$d/iter_0000009.h5.tmp.zz"
run "$tmp/l.log" --train-iters 2 --save-interval 1 --save "$d"
show "$tmp/l.log" | grep -i 'error\|removed'
check "a run with leftovers in --save trains and saves (exit $rc)" \
    test $rc -eq 0 -a "$(tracker "$d")" = 2
check "it removed both leftovers" \
    test ! -e "$d/iter_0000001.h5.tmp.Ab12Cd" -a ! -e "$d/latest_checkpointed_iteration.txt.tmp.4242"
check "and said so in one line" \
    test "$(grep -c "$d: removed 2 leftover temporary files of an interrupted earlier save" "$tmp/l.log")" -eq 1
check "a file of another name and a link named like a temporary stay, the target too" \
    sh -c "test -f '$d/notes.tmp.1' && test -L '$d/iter_0000009.h5.tmp.zz' &&
           test \"\$(cat '$tmp/victim')\" = precious"
rm -f "$d/notes.tmp.1" "$d/iter_0000009.h5.tmp.zz"

# --- 2. a save stopped midway ---
runenv=GRIDLM_TEST_SAVE_SIGNAL=3:KILL
run "$tmp/k.log" --train-iters 3 --load "$d" --save "$d"
check "SIGKILL in the middle of the save of iteration 3 (exit $rc)" \
    sh -c "test $rc -eq 137 && grep -q 'test hook: signal 9' '$tmp/k.log'"
check "it left its temporary, no iter_0000003.h5, the tracker at 2" \
    sh -c "ls '$d' | grep -q '^iter_0000003\.h5\.tmp\.' && ! test -e '$d/iter_0000003.h5' &&
           test \"\$(cat '$d/latest_checkpointed_iteration.txt')\" = 2"
run "$tmp/k2.log" --train-iters 3 --load "$d" --save "$d"
check "the following run removes it, says so, and saves iteration 3" \
    sh -c "test $rc -eq 0 && test $(temps "$d") -eq 0 &&
           grep -q 'removed 1 leftover temporary file of an interrupted earlier save: iter_0000003.h5.tmp.' '$tmp/k2.log' &&
           test \"\$(cat '$d/latest_checkpointed_iteration.txt')\" = 3"
runenv=GRIDLM_TEST_SAVE_SIGNAL=4:TERM
run "$tmp/t.log" --train-iters 4 --load "$d" --save "$d"
check "SIGTERM in the middle of a save, without --exit-signal-handler: the process dies (exit $rc)" \
    sh -c "test $rc -eq 143 && grep -q 'test hook: signal 15' '$tmp/t.log'"
check "and its temporary is gone at once; the tracker stays at 3" \
    sh -c "test $(temps "$d") -eq 0 && ! test -e '$d/iter_0000004.h5' &&
           test \"\$(cat '$d/latest_checkpointed_iteration.txt')\" = 3"

# --- 3. links ---
l="$tmp/linked"
mkdir -p "$l"
echo victim >"$tmp/v1"
echo victim >"$tmp/v2"
echo victim >"$tmp/v3"
ln -s "$tmp/v1" "$l/latest_checkpointed_iteration.txt"
ln -s "$tmp/v2" "$l/iter_0000001.h5.tmp.4242"
ln -s "$tmp/v3" "$l/latest_checkpointed_iteration.txt.tmp.4242"
runenv=SLURM_JOB_ID=4242
run "$tmp/ln.log" --train-iters 1 --save "$l"
show "$tmp/ln.log" | grep -i error
check "links at the tracker and at the old temporary names (SLURM_JOB_ID=4242): the save goes on" \
    sh -c "test $rc -eq 0 && test -f '$l/iter_0000001.h5' && ! test -L '$l/iter_0000001.h5'"
check "the tracker is a file of its own now, naming 1" \
    sh -c "! test -L '$l/latest_checkpointed_iteration.txt' && test '$(tracker "$l")' = 1"
check "and no link's target was written" \
    test "$(cat "$tmp/v1" "$tmp/v2" "$tmp/v3" | tr '\n' ' ')" = "victim victim victim "
ln -s "$tmp/v1" "$l/iter_0000002.h5"
run "$tmp/ln2.log" --train-iters 2 --load "$l" --save "$l"
check "a link at the name of the checkpoint to come is refused before training (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -q 'iter_0000002.h5, beyond iteration 1' '$tmp/ln2.log' &&
           ! grep -q 'iteration  *2/' '$tmp/ln2.log' && test \"\$(cat '$tmp/v1')\" = victim"

# --- 4. checkpoint files without a readable tracker ---
# $d holds iterations 1, 2 and 3; a broken iteration 5 must not be named.
head -c 1000 "$d/iter_0000003.h5" >"$d/iter_0000005.h5"
mv "$d/latest_checkpointed_iteration.txt" "$tmp/tracker.saved"
want="--load $d/iter_0000003.h5, or write 3 into $d/latest_checkpointed_iteration.txt"
refused_load() {
    what=$1 needle=$2
    before=$(stamp "$d")
    run "$tmp/nt.log" --train-iters 6 --load "$d" --save "$d"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF -e "$needle" "$tmp/nt.log" &&
       grep -qF -e "$want" "$tmp/nt.log" && [ "$(stamp "$d")" = "$before" ]; then
        pass "$what: refused, naming iter_0000003.h5 and both fixes; nothing written"
    else
        show "$tmp/nt.log"
        fail "$what (exit $rc)"
    fi
}
refused_load "no tracker" "holds checkpoint files but no latest_checkpointed_iteration.txt"
ln -s "$tmp/nowhere/latest" "$d/latest_checkpointed_iteration.txt"
refused_load "a dangling tracker link" "is a link to $tmp/nowhere/latest, which does not exist"
rm -f "$d/latest_checkpointed_iteration.txt"
if mkfifo "$d/latest_checkpointed_iteration.txt" 2>/dev/null; then
    refused_load "a FIFO as the tracker (not waited on)" "is a FIFO (named pipe), not a regular file"
    rm -f "$d/latest_checkpointed_iteration.txt"
else
    skip "" "mkfifo failed"
fi
mv "$tmp/tracker.saved" "$d/latest_checkpointed_iteration.txt"
rm -f "$d/iter_0000005.h5"

# --- 5. another run's checkpoints in --save ---
before=$(stamp "$d")
run "$tmp/fresh.log" --train-iters 2 --save "$d"
check "a fresh run into a --save holding checkpoints up to 3 is refused (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -qF -- '$d holds $d/iter_0000003.h5 (and 2 more), beyond iteration 0' '$tmp/fresh.log' &&
           grep -qF -- '--load $d/iter_0000003.h5' '$tmp/fresh.log'"
check "before training, and nothing in --save changed" \
    sh -c "! grep -q 'iteration  *1/' '$tmp/fresh.log' && test '$(stamp "$d")' = '$before'"
run "$tmp/back.log" --train-iters 4 --load "$d/iter_0000002.h5" --save "$d"
check "resuming from iteration 2 into a --save that holds iteration 3 is refused too (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -qF 'iter_0000003.h5, beyond iteration 2' '$tmp/back.log' &&
           test '$(stamp "$d")' = '$before'"

# --- 6. unwritable --save, full disk ---
echo x >"$tmp/afile"
run "$tmp/nd.log" --train-iters 1 --save "$tmp/afile/ck"
check "--save under a regular file is refused at the start (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -qF -- '--save $tmp/afile/ck: $tmp/afile is a file, not a directory' '$tmp/nd.log' &&
           ! grep -q 'iteration  *1/' '$tmp/nd.log'"
# small_fs NAME SIZE [OPTIONS]: mount a tmpfs at $tmp/NAME; 1 when not allowed here
small_fs() {
    mkdir -p "$tmp/$1"
    mount -t tmpfs -o "size=$2${3:+,$3}" tmpfs "$tmp/$1" 2>/dev/null || return 1
    mounts="$mounts $tmp/$1"
}
if small_fs ro 64k ro; then
    run "$tmp/ro.log" --train-iters 1 --save "$tmp/ro/ck"
    check "--save on a read-only file system is refused at the start (exit $rc)" \
        sh -c "test $rc -eq 2 && grep -qF -- '--save $tmp/ro/ck: cannot create directory $tmp/ro/ck: Read-only file system' '$tmp/ro.log' &&
               ! grep -q 'iteration  *1/' '$tmp/ro.log'"
    umount "$tmp/ro" && mount -t tmpfs -o size=64k tmpfs "$tmp/ro" && mkdir "$tmp/ro/ck" &&
        mount -o remount,ro "$tmp/ro"
    run "$tmp/ro2.log" --train-iters 1 --save "$tmp/ro/ck"
    check "an existing --save directory there too: the probe file cannot be created (exit $rc)" \
        sh -c "test $rc -eq 2 && grep -qF -- '--save $tmp/ro/ck: cannot create a file beside $tmp/ro/ck/.gridlm-write-test' '$tmp/ro2.log' &&
               grep -q 'Read-only file system' '$tmp/ro2.log'"
else
    skip "" "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
    skip "" "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
fi
if small_fs full 200k; then
    run "$tmp/full.log" --train-iters 1 --save "$tmp/full/ck"
    check "a full disk: 'No space left on device' with the path (exit $rc)" \
        sh -c "test $rc -ne 0 && grep -qF -- '--save $tmp/full/ck: $tmp/full/ck: No space left on device' '$tmp/full.log'"
    check "and no temporary, no checkpoint, no tracker left there" \
        test -z "$(ls -A "$tmp/full/ck")"
else
    skip "" "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
    skip "" "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
fi

# --- 7. another architecture ---
ck3="$d/iter_0000003.h5"
arch() {
    what=$1 needle=$2; shift 2
    run "$tmp/arch.log" --train-iters 4 --load "$ck3" "$@"
    if [ $rc -eq 2 ] && grep -qF -e "$needle" "$tmp/arch.log"; then
        pass "$what: refused (exit 2), naming both values"
    else
        show "$tmp/arch.log"
        fail "$what (exit $rc)"
    fi
}
arch "--rotary-base" "--rotary-base 10000 there, 500000 here" --rotary-base 500000
arch "--norm-epsilon" "--norm-epsilon 1e-05 there, 1e-06 here" --norm-epsilon 1e-6
arch "--use-rope-scaling" "--use-rope-scaling off there, on here" --use-rope-scaling
run "$tmp/arch2.log" --train-iters 4 --load "$ck3" --rotary-base 500000 --norm-epsilon 1e-6
check "two fields at once: both named in one line (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -q 'differs from this run.s in 2 settings: --norm-epsilon 1e-05 there, 1e-06 here; --rotary-base 10000 there, 500000 here' '$tmp/arch2.log' &&
           test \$(grep -c 'gridlm-train: error' '$tmp/arch2.log') -eq 1"
# The RoPE scaling factors count once both scale.
run "$tmp/rs.log" --train-iters 1 --save "$tmp/rs" --use-rope-scaling
run "$tmp/rs2.log" --train-iters 2 --load "$tmp/rs" --use-rope-scaling --rope-scaling-factor 16
check "--rope-scaling-factor of two scaled models (exit $rc)" \
    sh -c "test $rc -eq 2 && grep -qF -- '--rope-scaling-factor 8 there, 16 here' '$tmp/rs2.log'"
run "$tmp/rs3.log" --train-iters 2 --load "$tmp/rs" --use-rope-scaling
check "the same scaled model resumes (exit $rc)" test $rc -eq 0
done_testing
