#!/bin/sh
# t/bench-cpu.t: gridlm-bench on the CPU back end -- the format of what it
# prints and the correctness checks it makes, not its speed.
#   gemm       tiny shapes in every layout; each run's own check compares
#              sampled entries with a double-precision host product, so
#              exit 0 means the products were right; table and JSON.
#   comm       2 ranks (MPI back end): every size of each collective,
#              nccl-tests' counts and bus-bandwidth factors, the exact-
#              result check; 4 ranks with TP=2 under Open MPI.
#   attention  FLOP counts of FlashAttention's convention, exactly.
#   fp8        the table, and the FP8 products checked against a double
#              sum of the decoded operands (the CPU's exact emulation).
#   usage      bad subcommands and values exit 2 with one line.

. "$(dirname "$0")/tap.sh"
prog=./src/tools/gridlm-bench
[ -x "$prog" ] || skip_all "$prog not built"
tmp=${TMPDIR:-/tmp}/bench-cpu.$$
trap 'rm -f "$tmp".*' EXIT INT TERM

# fail_run DESCRIPTION: a failed result, the command's output as comments
fail_run() {
    fail "$1"
    sed 's/^/# stdout: /' "$tmp".out; sed 's/^/# stderr: /' "$tmp".err
}
# run DESCRIPTION AWK-PROGRAM -- COMMAND...: the command must exit 0 and
# the awk program, reading its stdout, must exit 0.
run() {
    what=$1; prg=$2; shift 3
    "$@" >"$tmp".out 2>"$tmp".err
    code=$?
    if [ $code -eq 0 ] && awk "$prg" "$tmp".out; then pass "$what"; else fail_run "$what (exit $code)"; fi
}

plan 16

# ---- gemm ---------------------------------------------------------------
# The table: '#' lines, a header, then one row per shape: m n k and four
# positive numbers (ms, GFLOP/s mean, min, max with min <= mean <= max).
table='
/^#/ { next }
!hdr { hdr = ($1 == "m" && $2 == "n" && $3 == "k" && $5 == "gflops"); next }
{ rows++; shape[rows] = $1 "x" $2 "x" $3
  if (NF != 7 || !($4 > 0) || !($5 > 0) || $6 > $5 * 1.000001 || $7 < $5 * 0.999999) bad = 1 }
END { exit !(hdr && !bad && rows == 2 && shape[1] == "16x16x16" && shape[2] == "40x24x72") }'
for layout in NT NN TN; do
    run "gemm --layout $layout: table, and the product checked" "$table" -- \
        "$prog" gemm --device cpu --shapes 16,40x24x72 --layout $layout --iters 3 --warmup 1
done
run "gemm --out-dtype f32 (beta 1): checked" "$table" -- \
    "$prog" gemm --device cpu --shapes 16,40x24x72 --layout TN --out-dtype f32 --iters 2
json='{ if ($0 !~ /^\{"bench":"gemm",.*"m":[0-9]+,"n":[0-9]+,"k":[0-9]+,.*"tflops":[0-9.e+-]+,.*"checked":true\}$/) bad = 1; rows++ }
END { exit !(rows == 2 && !bad) }'
run "gemm --json: one object per shape" "$json" -- \
    "$prog" gemm --device cpu --shapes 16,40x24x72 --iters 2 --json

# ---- comm -----------------------------------------------------------------
# JSON rows of 2 ranks, 1K..16K: 5 sizes x 3 collectives, count = bytes/4
# for all-reduce and bytes/8 (each rank's block) for the others, busbw =
# algbw x 2(n-1)/n = 1 x algbw for all-reduce and (n-1)/n = 0.5 x algbw
# for reduce-scatter and all-gather.
commjson='
function num(k,   r) { if (!match($0, "\"" k "\":[^,}]*")) return "x"; r = substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return r + 0 }
function str(k) { return match($0, "\"" k "\":\"[^\"]*\"") ? substr($0, RSTART + length(k) + 4, RLENGTH - length(k) - 5) : "" }
{ rows++; op = str("op"); n = num("ranks"); b = num("bytes"); f = op == "all-reduce" ? 2 * (n - 1) / n : (n - 1) / n
  per[op]++
  if (str("group") != "world" || n != want_n || str("backend") != "mpi" || $0 !~ /"checked":true/) bad = 1
  if (num("count") != (op == "all-reduce" ? b / 4 : b / (4 * n))) bad = 2
  if (!(num("time_us") > 0) || !(num("algbw_gbps") > 0)) bad = 3
  r = num("busbw_gbps") / num("algbw_gbps"); if (r < f * (1 - 1e-5) || r > f * (1 + 1e-5)) bad = 4 }
END { if (bad) print "bad " bad; exit !(!bad && rows == 15 && per["all-reduce"] == 5 && per["reduce-scatter"] == 5 && per["all-gather"] == 5) }'
run "comm, 2 ranks: sizes, counts, busbw factors, results checked" "BEGIN { want_n = 2 } $commjson" -- \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 "$prog" comm --device cpu --min-bytes 1K --max-bytes 16K \
    --iters 3 --warmup 1 --json
commtable='
/^#/ { next }
!hdr { hdr = ($1 == "group" && $3 == "op" && $8 == "busbw"); next }
{ rows++; if (NF != 9 || $9 != "ok" || $2 != 2) bad = 1 }
END { exit !(hdr && !bad && rows == 6) }'
run "comm --dtype bf16, 2 ranks: table, results checked" "$commtable" -- \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 "$prog" comm --device cpu --min-bytes 256 --max-bytes 512 \
    --dtype bf16 --iters 2 --warmup 1
if [ "$GL_MPI_FLAVOR" = openmpi ]; then
    # world (4) and the tp and dp groups (2 each): factors 1.5, 1 and 0.5.
    groups='
{ g = $1; if (g !~ /^(world|tp|dp)$/ || $9 != "ok") bad = 1; seen[g]++
  f = $3 == "all-reduce" ? 2 * ($2 - 1) / $2 : ($2 - 1) / $2
  if ($2 != (g == "world" ? 4 : 2)) bad = 1 }
END { exit !(!bad && seen["world"] == 3 && seen["tp"] == 3 && seen["dp"] == 3) }'
    run "comm, 4 ranks, TP=2: world, tp and dp groups measured and checked" \
        "/^#/ || \$1 == \"group\" { next } $groups" -- \
        $MPIEXEC $MPIEXEC_FLAGS -n 4 "$prog" comm --device cpu --tensor-model-parallel-size 2 \
        --min-bytes 4K --max-bytes 4K --iters 2 --warmup 1
else
    skip "" "4 ranks only under Open MPI (MPICH busy-polls)"
fi

# ---- attention ------------------------------------------------------------
# FLOPs: fwd 4 B S^2 Hq D / 2 = 4*1*32^2*4*16/2 = 131072 at S = 32 (32768
# at S = 16); bwd 2.5 x fwd.
attn='
function num(k) { return match($0, "\"" k "\":[^,}]*") ? substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0 : -1 }
{ rows++; s = num("seq"); f = 4 * s * s * 4 * 16 / 2; if ($0 ~ /"pass":"bwd"/) f *= 2.5
  if (num("flops") != f || !(num("ms") > 0) || $0 !~ /"checked":true/) bad = 1 }
END { exit !(!bad && rows == 4) }'
run "attention --json: FLOP counts, output checked" "$attn" -- \
    "$prog" attention --device cpu --seq-lengths 16,32 --num-attention-heads 4 \
    --num-query-groups 2 --kv-channels 16 --iters 2 --warmup 1 --json

# ---- fp8 ------------------------------------------------------------------
# One row per shape: m n k, then act, fp8, fast and blk (block scaling) ms
# and rates (x: act time over the FP8 product's), then the quantizations'
# ms and GB/s (per tensor, then 1 x 128 tiles): numbers, none negative,
# and some time measured.  Not each one positive: printed to 3 and 1
# decimals, a few microseconds' work, or a rate on a loaded machine (the
# quantization of the small shape took 1.9 ms in one CI run, 0.0 GB/s),
# rounds to zero.
fp8='
/^#/ { next }
!hdr { hdr = ($1 == "m" && $4 == "act_ms" && $12 == "blk_ms" && $15 == "quant_ms" &&
              $17 == "tq_ms" && $18 == "GB/s"); next }
{ rows++; shape[rows] = $1 "x" $2 "x" $3
  for (i = 4; i <= 18; i++) if ($i !~ /^[0-9]+(\.[0-9]+)?$/) bad = 1
  ms = $4 + $6 + $9 + $12 + $15 + $17
  if (!(ms > 0) || NF != 18) bad = 1 }
END { exit !(hdr && !bad && rows == 2 && shape[1] == "16x16x16" && shape[2] == "32x48x80") }'
run "fp8: table, the FP8 products checked (per tensor and block-scaled)" "$fp8" -- \
    "$prog" fp8 --device cpu --shapes 16,32x48x80 --iters 2 --warmup 1
fp8json='{ rows++; if ($0 !~ /^\{"bench":"fp8",.*"case":"(act|fp8|fp8_fast|fp8_block|quant|quant_tiles)"/) bad = 1
  if ($0 ~ /"case":"fp8_block"/ && $0 ~ /"checked":true/) blk++ }
END { exit !(rows == 6 && blk == 1 && !bad) }'
run "fp8 --json: six objects per shape, the block-scaled product checked" "$fp8json" -- \
    "$prog" fp8 --device cpu --shapes 32 --iters 1 --warmup 0 --json

# ---- usage errors ---------------------------------------------------------
usage() {
    what=$1; needle=$2; shift 2
    "$prog" "$@" >"$tmp".out 2>"$tmp".err
    code=$?
    if [ $code -eq 2 ] && [ "$(wc -l <"$tmp".err)" -eq 1 ] && grep -q -- "$needle" "$tmp".err; then
        pass "$what"
    else
        fail_run "$what (exit $code)"
    fi
}
usage "unknown subcommand" "unknown subcommand 'gem'" gem
usage "a bad shape names --shapes and the item" "--shapes '16,4x4': '4x4' is not a shape" \
    gemm --device cpu --shapes 16,4x4
usage "fp8 shapes must be multiples of 16" "'24x16x16' is not a shape of FP8 products" \
    fp8 --device cpu --shapes 24x16x16
usage "an unknown collective" "unknown item 'all-to-all'" comm --device cpu --ops all-reduce,all-to-all
usage "GQA groups must divide the heads" "--num-query-groups 3 does not divide" \
    attention --device cpu --num-attention-heads 4 --num-query-groups 3

done_testing
