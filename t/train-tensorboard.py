"""train-tensorboard.py: read one of gridlm-train's TensorBoard event files
with the tensorboard package's own readers and compare it with the run's
--log-json records (t/train-tensorboard.t).

    python3 train-tensorboard.py FILE JSONL WORLD INTERVAL FLAGS

FLAGS is a comma-separated list of the optional scalars the run asked for
(timers, memory, ppl, world) and of the defaults it turned off (nolr,
noscale); "-" for none.  INTERVAL is --tensorboard-log-interval; the run
must log every iteration (--log-interval 1), so that the JSON records hold
each iteration's own values.  Prints one "PASS text" or "FAIL text" line
per check.
"""
import json
import math
import os
import re
import socket
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow


def result(good, text):
    print(("PASS " if good else "FAIL ") + text)
    sys.stdout.flush()


def f32(x):
    """x rounded to float32, as simple_value holds it."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def close(got, want):
    if want is None:
        return False
    want = f32(want)
    return abs(got - want) <= 1e-6 * max(abs(want), 1e-30)


def records(path):
    """Every record's bytes, each frame's two CRCs checked by TensorBoard's
    reader (a bad one raises DataLossError)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    out = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return out
        out.append(reader.record())


def main():
    path, jsonl, world, interval, flags = sys.argv[1:6]
    world, interval = int(world), int(interval)
    flags = set() if flags == "-" else set(flags.split(","))

    name = os.path.basename(path)
    want = r"events\.out\.tfevents\.\d{10}\.%s$" % re.escape(socket.gethostname())
    result(re.match(want, name) is not None, "named as TensorFlow names it: " + name)

    try:
        raw = records(path)
        result(True, "%d records, every CRC good" % len(raw))
    except errors.DataLossError as e:
        result(False, "a record fails its CRC check: %s" % e)
        return
    first = event_pb2.Event.FromString(raw[0])
    result(first.file_version == "brain.Event:2" and first.wall_time > 1.5e9,
           "the first record is the file_version event 'brain.Event:2'")
    kinds = [event_pb2.Event.FromString(r).WhichOneof("what") for r in raw[1:]]
    result(kinds and all(k == "summary" for k in kinds), "every other record is a summary")

    acc = event_accumulator.EventAccumulator(
        path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])

    lines = [json.loads(l) for l in open(jsonl) if l.strip()]
    train = [r for r in lines if "loss" in r]
    valid = [r for r in lines if "valid_loss" in r]
    consumed = {r["iteration"]: r["consumed_samples"] for r in train}

    pairs = ["batch-size", "lm loss", "grad-norm"]
    if "nolr" not in flags:
        pairs.append("learning-rate")
    if "noscale" not in flags:
        pairs.append("loss-scale")
    if "world" in flags:
        pairs.append("world-size")
    expect = set(pairs) | {t + " vs samples" for t in pairs}
    if "memory" in flags:
        expect |= {"mem-reserved-bytes", "mem-allocated-bytes", "mem-max-allocated-bytes"}
    if "timers" in flags:
        expect |= {"iteration-time", "throughput"}
    if valid:
        expect |= {"lm loss validation", "lm loss validation vs samples"}
        if "ppl" in flags:
            expect |= {"lm loss validation ppl", "lm loss validation ppl vs samples"}
    result(tags == expect, "the tags are Megatron-LM's: missing %s, extra %s"
           % (sorted(expect - tags), sorted(tags - expect)))

    def series(tag):
        return {e.step: e.value for e in acc.Scalars(tag)} if tag in tags else {}

    # every INTERVAL-th iteration, at its iteration and its consumed samples
    steps = [r["iteration"] for r in train if r["iteration"] % interval == 0]
    want_of = {
        "lm loss": lambda r: r["loss"],
        "grad-norm": lambda r: r["grad_norm"],
        "learning-rate": lambda r: r["lr"],
        "batch-size": lambda r: r["global_batch_size"],
        "loss-scale": lambda r: 1.0,
        "world-size": lambda r: world,
    }
    for tag in pairs:
        s, v = series(tag), series(tag + " vs samples")
        good = sorted(s) == steps and sorted(v) == sorted(consumed[i] for i in steps)
        bad = []
        for r in train:
            i = r["iteration"]
            if i % interval:
                continue
            w = want_of[tag](r)
            if not (close(s.get(i, math.nan), w) and close(v.get(consumed[i], math.nan), w)):
                bad.append((i, s.get(i), w))
        result(good and not bad, "%s at iterations %s and vs samples, as --log-json%s"
               % (tag, steps, " (differs: %s)" % bad[:3] if bad else ""))

    if "memory" in flags:
        peak, used = series("mem-max-allocated-bytes"), series("mem-allocated-bytes")
        res = series("mem-reserved-bytes")
        good = sorted(peak) == steps and all(used[i] <= peak[i] and res[i] == used[i]
                                             for i in steps)
        if world == 1:   # the writer's peak is the world's
            good = good and all(close(peak[r["iteration"]], r["mem_gib"] * 2.0 ** 30)
                                for r in train if r["iteration"] in peak)
        result(good, "mem-*-bytes: in use <= peak%s"
               % (", peak as --log-json's mem_gib" if world == 1 else ""))

    if "timers" in flags:
        it, tp = series("iteration-time"), series("throughput")
        logged = [r["iteration"] for r in train]
        good = sorted(it) == logged and sorted(tp) == logged
        if world == 1:   # rank 0's times are the writer's
            good = good and all(close(it[r["iteration"]], r["elapsed_ms"] / 1e3) and
                                close(tp[r["iteration"]], r["tflops_per_gpu"]) for r in train)
        result(good, "iteration-time and throughput at each logged iteration%s"
               % (", as --log-json" if world == 1 else ""))

    if valid:
        vl, vs = series("lm loss validation"), series("lm loss validation vs samples")
        good = sorted(vl) == [r["iteration"] for r in valid]
        good = good and all(close(vl[r["iteration"]], r["valid_loss"]) and
                            close(vs[consumed[r["iteration"]]], r["valid_loss"]) for r in valid)
        result(good, "lm loss validation at %s and vs samples, as --log-json"
               % [r["iteration"] for r in valid])
        if "ppl" in flags:
            pl = series("lm loss validation ppl")
            result(all(close(pl[r["iteration"]], r["valid_ppl"]) for r in valid),
                   "lm loss validation ppl, as --log-json")


if __name__ == "__main__":
    main()
