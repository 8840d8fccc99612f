#!/usr/bin/env python3
"""A corpus of malformed and abusive gRPC requests for a `tli host serve` (docs/reliability.md).

Usage: hostile_requests.py HOST:PORT --token TOKEN --job JOB_ID [--mutations N] [--seed S]

The host must require TOKEN, have a memory budget under 8 GiB and hold JOB_ID, a finished job of the `behaviour` plugin (the
target of the cases that need an existing job). Every request is written by hand in the
protobuf wire format (no generated code, so any byte can be wrong) and sent as raw bytes.

Each case of the corpus names the status code the host must answer (see docs/api.md); a few
cases are valid-but-abusive requests that must succeed, and those that start a job say so,
so the caller can account for every job the corpus created. With --mutations N, N random
mutations of valid requests follow (bytes flipped, inserted, deleted, truncated, varints
maxed); any code is acceptable for them except those that mean the host failed (INTERNAL,
UNKNOWN, UNAVAILABLE, DEADLINE_EXCEEDED, DATA_LOSS).

Prints one JSON object: per case its expected and received code and the start of the
message; the mutation histogram; the job ids the accepted requests created; the health
check at the end. Exit 0 when every case got its code, no mutation got a host-failure
code and the host still reports SERVING; 1 otherwise.
"""
import argparse
import json
import random
import struct
import sys
import time

import grpc

TS = "/tli.v1.TrainingService/"
HOST_FAILURE = {"INTERNAL", "UNKNOWN", "UNAVAILABLE", "DEADLINE_EXCEEDED", "DATA_LOSS"}

# ----- the protobuf wire format, by hand -------------------------------------------------


def varint(n):
    n &= (1 << 64) - 1  # negative int32/int64 are ten bytes of two's complement
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def vint(field, n):
    return key(field, 0) + varint(n)


def ld(field, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return key(field, 2) + varint(len(payload)) + payload


def dbl(field, x):
    return key(field, 1) + struct.pack("<d", x)


def packed(field, values):
    return ld(field, b"".join(varint(v) for v in values))


def read_varint(data, i):
    shift = value = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7


def first_field(data, wanted):
    """The payload (bytes or int) of the first field `wanted` of a message, or None."""
    i = 0
    while i < len(data):
        tag, i = read_varint(data, i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = read_varint(data, i)
        elif wire == 2:
            size, i = read_varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            return None
        if field == wanted:
            return value
    return None


# ----- valid messages --------------------------------------------------------------------


def plugin_model(steps=5, plugin="behaviour", config_json="", pooled=False, priority=0):
    config = ld(1, plugin) + (ld(2, config_json) if config_json else b"")
    return (
        vint(1, steps)
        + (vint(2, priority) if priority else b"")
        + (vint(3, 1) if pooled else b"")
        + ld(20, config)
    )


def template_model(config, steps=5):
    return vint(1, steps) + ld(10, config)


def synthetic(rows=100, seed=0, sigma=None):
    body = vint(1, rows) + (vint(2, seed) if seed else b"")
    return ld(2, body + (dbl(3, sigma) if sigma is not None else b""))


def data_path(path):
    return ld(1, path)


def start(name="hostile", model=None, models=None, assets=None, extra=b""):
    """A StartTrainingRequest; by default one small behaviour model on one synthetic asset."""
    out = ld(1, name) if name is not None else b""
    if models is None:
        out += ld(2, model if model is not None else plugin_model())
    else:
        out += b"".join(ld(3, m) for m in models)
    for a in assets if assets is not None else [synthetic()]:
        out += ld(4, a)
    return out + extra


def job(job_id):
    return vint(1, job_id)


# ----- the corpus --------------------------------------------------------------------------


class Case:
    """One request and the status code the host must answer."""

    def __init__(self, name, method, request, expected, kind="unary", metadata=None,
                 timeout=30.0, starts_job=False, compression=None):
        # `request`: bytes (a list of them for client streams), or a function of the job
        # the last accepted case started.
        self.name, self.method, self.request = name, method, request
        self.expected, self.kind, self.metadata = expected, kind, metadata
        self.timeout, self.starts_job, self.compression = timeout, starts_job, compression


def corpus(token, job_id):
    bad = "INVALID_ARGUMENT"
    mib = 1 << 20
    c = []

    def add(name, method, request, expected, **kw):
        c.append(Case(name, method, request, expected, **kw))

    def st(name, request, expected=bad, **kw):
        add(name, TS + "StartTraining", request, expected, **kw)

    # Authentication (the host requires a token; health never does).
    valid = start()
    for name, md in [
        ("auth: no authorization", []),
        ("auth: wrong token", [("authorization", "Bearer not-" + token)]),
        ("auth: Basic scheme", [("authorization", "Basic " + token)]),
        ("auth: Bearer and nothing", [("authorization", "Bearer ")]),
        ("auth: token without scheme", [("authorization", token)]),
        ("auth: misspelt header", [("authorisation", "Bearer " + token)]),
        ("auth: 8 KiB token", [("authorization", "Bearer " + "x" * 8192)]),
    ]:
        st(name, valid, "UNAUTHENTICATED", metadata=md)
    add("auth: list without a token", TS + "ListTrainingJobs", b"", "UNAUTHENTICATED", metadata=[])
    add("auth: reflection without a token", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        [ld(7, "")], "UNAUTHENTICATED", kind="stream_stream", metadata=[])
    add("auth: control token on the worker service", "/tli.v1.WorkerService/AttachWorker",
        ld(1, vint(1, 1) + vint(2, 1)), "UNIMPLEMENTED")
    add("health without a token", "/grpc.health.v1.Health/Check", b"", "OK", metadata=[])
    add("health: unknown service", "/grpc.health.v1.Health/Check", ld(1, "nope.Service"), "NOT_FOUND")

    # Methods and services that do not exist; wrong cardinality; unsupported compression.
    add("unknown method", TS + "DeleteEverything", b"", "UNIMPLEMENTED")
    add("unknown package version", "/tli.v2.TrainingService/StartTraining", valid, "UNIMPLEMENTED")
    add("unknown service", "/evil.Service/Run", b"", "UNIMPLEMENTED")
    add("8 KiB method name", TS + "X" * 8192, b"", "UNIMPLEMENTED")
    add("unary method given no message", TS + "GetTrainingStatus", [], "UNIMPLEMENTED",
        kind="stream_unary")
    # tonic answers the first of two messages and ignores the second (gRPC's table says
    # UNIMPLEMENTED); harmless for a read, and it must not break the host.
    add("unary method given two messages", TS + "GetTrainingStatus", [job(job_id), job(job_id)],
        "OK", kind="stream_unary")
    st("gzip-compressed request", valid, "UNIMPLEMENTED", compression=grpc.Compression.Gzip)

    # Malformed protobuf bytes: the request is not a message of its type.
    for name, raw in [
        ("truncated varint", vint(5, 1)[:1] + b"\xff"),
        ("varint of eleven bytes", key(5, 0) + b"\xff" * 10 + b"\x01"),
        ("length beyond the end", key(1, 2) + varint(1000) + b"abc"),
        ("length of 2^63", key(1, 2) + varint(1 << 63) + b"abc"),
        ("string field sent as a varint", vint(1, 5) + ld(2, plugin_model())),
        ("message field sent as fixed64", key(2, 1) + b"\0" * 8),
        ("invalid UTF-8 in name", start(name=None, extra=ld(1, b"\xff\xfe\xfd"))),
        ("invalid UTF-8 in data_path", start(assets=[ld(1, b"/tmp/\xc3\x28")])),
        ("field number 0", vint(0, 1) + valid),
        ("field number 2^29", vint(1 << 29, 1) + valid),
        ("wire type 7", key(15, 7) + valid),
        ("end group without a start", key(15, 4) + valid),
        ("group never ended", key(15, 3) + vint(1, 1)),
        ("groups nested 100000 deep", key(15, 3) * 100000 + key(15, 4) * 100000),
        ("packed hidden_sizes cut short",
         start(model=template_model(ld(1, b"\x80\x80"), steps=5))),
        ("a kilobyte of 0xff", b"\xff" * 1024),
    ]:
        st("bytes: " + name, raw)
    add("bytes: list with a cut page token", TS + "ListTrainingJobs", key(8, 2) + varint(50) + b"x",
        bad)
    add("bytes: watch with a truncated job id", TS + "WatchTraining", b"\x08\x80", bad,
        kind="unary_stream")
    add("bytes: health with garbage", "/grpc.health.v1.Health/Check", b"\x0a\x05ab", bad, metadata=[])
    add("unknown field 2^29-1 is ignored", TS + "GetTrainingStatus",
        job(job_id) + vint((1 << 29) - 1, 7), "OK")

    # Oversized messages (the host's limit is 4 MiB).
    st("5 MiB features_json", start(extra=ld(9, "x" * (5 * mib))), "RESOURCE_EXHAUSTED")
    st("10 MB JSON config", start(model=plugin_model(config_json='{"a":"' + "y" * 10_000_000 + '"}')),
       "RESOURCE_EXHAUSTED")
    add("5 MiB list filter", TS + "ListTrainingJobs", ld(2, "p" * (5 * mib)), "RESOURCE_EXHAUSTED")

    # Huge repeated fields and counts.
    tiny_model = plugin_model(steps=1)
    tiny_asset = synthetic(rows=64)
    st("100000 models", start(models=[tiny_model] * 100_000))
    st("100000 assets", start(assets=[tiny_asset] * 100_000))
    st("100000 models × 100000 assets", start(models=[tiny_model] * 100_000,
                                              assets=[tiny_asset] * 100_000))
    st("pooled model on 200000 assets",
       start(model=plugin_model(plugin="template", pooled=True),
             assets=[synthetic(rows=64, seed=s + 1) for s in range(200_000)]))
    st("1024 assets of 10M synthetic rows",
       start(assets=[synthetic(rows=10_000_000, seed=s + 1) for s in range(1024)]))
    st("1000000 hidden sizes", start(model=template_model(packed(1, [8] * 1_000_000))))
    add("1000000 states in a list filter", TS + "ListTrainingJobs", packed(1, [4] * 1_000_000), "OK")
    add("100000 metric names in a history", TS + "GetTrainingHistory",
        job(job_id) + b"".join(ld(2, "m%06d" % i) for i in range(100_000)), "OK")

    # Absurd numbers.
    u64max, u32max = (1 << 64) - 1, (1 << 32) - 1
    st("steps u64::MAX", start(model=plugin_model(steps=u64max)))
    st("steps 0", start(model=plugin_model(steps=0)))
    st("slice_steps u64::MAX", start(extra=vint(8, u64max)))
    st("synthetic rows u64::MAX", start(assets=[synthetic(rows=u64max)]))
    st("synthetic rows 0", start(assets=[synthetic(rows=0)]))
    st("synthetic sigma NaN", start(assets=[synthetic(sigma=float("nan"))]))
    st("synthetic sigma -inf", start(assets=[synthetic(sigma=float("-inf"))]))
    st("checkpoint every_seconds NaN", start(extra=ld(7, dbl(2, float("nan")))))
    st("checkpoint every_seconds -1", start(extra=ld(7, dbl(2, -1.0))))
    st("learning rate inf", start(model=template_model(dbl(2, float("inf")))))
    st("hidden size u32::MAX", start(model=template_model(packed(1, [u32max]))))
    st("batch size u32::MAX", start(model=template_model(packed(1, [8]) + vint(4, u32max))))
    # Eight layers of 8192 (the template's largest) need some 9 GB; the host's budget is less.
    st("a task bigger than the memory budget",
       start(model=template_model(packed(1, [8192] * 8))), "RESOURCE_EXHAUSTED")
    st("slurm gpus_per_task u32::MAX", start(extra=ld(11, vint(1, u32max))))
    add("status of job 0", TS + "GetTrainingStatus", job(0), bad)
    add("status of job u64::MAX", TS + "GetTrainingStatus", job(u64max), "NOT_FOUND")
    add("status of job 2^63-1", TS + "GetTrainingStatus", job((1 << 63) - 1), "NOT_FOUND")
    add("status of job -1 as varint", TS + "GetTrainingStatus", vint(1, -1), "NOT_FOUND")
    add("stop task u64::MAX", TS + "StopTraining", job(job_id) + vint(2, u64max), "NOT_FOUND")
    add("stop task 2^62", TS + "StopTraining", job(job_id) + vint(2, 1 << 62), "NOT_FOUND")
    add("forced stop of a finished job, u32::MAX deadline", TS + "StopTraining",
        job(job_id) + vint(3, 1) + vint(4, u32max), "FAILED_PRECONDITION")
    add("resume job u64::MAX", TS + "ResumeTraining", job(u64max), "NOT_FOUND")
    add("history of job 0", TS + "GetTrainingHistory", job(0), bad)
    add("history max points u32::MAX", TS + "GetTrainingHistory", job(job_id) + vint(3, u32max), bad)
    add("page_size 0 is the default", TS + "ListTrainingJobs", vint(7, 0), "OK")
    add("page_size 2^31", TS + "ListTrainingJobs", vint(7, 1 << 31), bad)
    add("page_size u32::MAX", TS + "ListTrainingJobs", vint(7, u32max), bad)
    add("created_after negative", TS + "ListTrainingJobs", vint(4, -5), bad)
    add("created_after i64::MAX, before 1", TS + "ListTrainingJobs",
        vint(4, (1 << 63) - 1) + vint(5, 1), bad)
    add("made-up page token", TS + "ListTrainingJobs", ld(8, "0" * 32), bad)
    add("1 MiB page token", TS + "ListTrainingJobs", ld(8, "a" * mib), bad)
    add("watch job 0", TS + "WatchTraining", job(0), bad, kind="unary_stream")
    add("watch job u64::MAX", TS + "WatchTraining", job(u64max), "NOT_FOUND", kind="unary_stream")
    add("watch a finished job, interval u32::MAX", TS + "WatchTraining",
        job(job_id) + vint(2, u32max), "OK", kind="unary_stream")

    # Unknown enum values.
    st("executor 99", start(extra=vint(10, 99)))
    st("executor -1", start(extra=vint(10, -1)))
    st("executor SLURM on a host without Slurm", start(extra=vint(10, 2)))
    st("lr_schedule 7", start(model=template_model(vint(6, 7))))
    st("dqn env 9", start(model=vint(1, 5) + ld(11, vint(1, 9))))
    st("tft precision 5", start(model=vint(1, 5) + ld(14, vint(1, 5))))
    add("list state 99", TS + "ListTrainingJobs", packed(1, [1, 99]), bad)
    add("list state UNSPECIFIED", TS + "ListTrainingJobs", packed(1, [0]), bad)
    add("list order 42", TS + "ListTrainingJobs", vint(6, 42), bad)

    # Names, paths, devices and JSON.
    st("empty name", start(name=""))
    st("blank name", start(name=" \t "))
    st("escape sequences in the name", start(name="\x1b[2J\x1b[31mpwned\x07"))
    st("NUL in the name", start(name="a\0b"))
    st("1 MiB name", start(name="n" * mib))
    st("1 MiB plugin name", start(model=plugin_model(plugin="p" * mib)))
    st("path traversal in the plugin name", start(model=plugin_model(plugin="../../../etc/passwd")))
    st("empty plugin name", start(model=plugin_model(plugin="")))
    st("model without a config", start(model=vint(1, 5)))
    st("asset without a source", start(assets=[b""]))
    st("no asset", start(assets=[]))
    st("both model and models", start(model=plugin_model(), extra=ld(3, plugin_model())))
    for name, path, code in [
        ("../ traversal", "../../../../../../etc/passwd", "PERMISSION_DENIED"),
        ("/etc/shadow", "/etc/shadow", "PERMISSION_DENIED"),
        ("/proc/self/mem", "/proc/self/mem", "PERMISSION_DENIED"),
        ("/dev/zero", "/dev/zero", "PERMISSION_DENIED"),
        ("NUL byte", "/etc/passwd\0.dbn", bad),
        ("1 MiB long", "/d" * (mib // 2), bad),
        ("blank", "   ", bad),
    ]:
        st("data_path: " + name, start(assets=[data_path(path)]), code)
    st("device gpu", start(extra=ld(6, "gpu")))
    st("device cuda:99999999999", start(extra=ld(6, "cuda:99999999999")))
    st("1 MiB device", start(extra=ld(6, "cuda:" + "9" * mib)))
    st("features_json not JSON", start(extra=ld(9, "{not json")))
    st("features_json an array", start(extra=ld(9, "[1,2,3]")))
    st("features_json nested 100000 deep", start(extra=ld(9, "[" * 100_000 + "]" * 100_000)))
    st("config_json not JSON", start(model=plugin_model(config_json="hidden_sizes=8")))
    st("config_json a string", start(model=plugin_model(config_json='"x"')))
    st("config_json nested 100000 deep",
       start(model=plugin_model(config_json='{"a":' * 100_000 + "1" + "}" * 100_000)))
    st("config_json number 1e999", start(model=plugin_model(config_json='{"a":1e999}')))
    st("config_json 3 MiB string in an unknown key",
       start(model=plugin_model(plugin="template", config_json='{"z":"' + "q" * (3 * mib) + '"}')))
    st("config_json 3 MiB unknown key (quoted in the error)",
       start(model=plugin_model(plugin="template", config_json='{"' + "k" * (3 * mib) + '":1}')))

    # Deadlines, on a long job (accepted) that the last case stops.
    add("a deadline of 30 years", TS + "ListTrainingJobs", b"", "OK", timeout=1e9)
    st("accepted: a long job to watch",
       start(name="long", model=plugin_model(steps=1_000_000,
                                              config_json='{"sleep_ms_per_step": 10}')),
       "OK", starts_job=True)
    add("watch a running job with a 1 s deadline", TS + "WatchTraining",
        lambda long_job: job(long_job) + vint(2, 50), "DEADLINE_EXCEEDED", kind="unary_stream",
        timeout=1.0)
    add("forced stop with a deadline of 49 days", TS + "StopTraining",
        lambda long_job: job(long_job) + vint(3, 1) + vint(4, u32max), "OK")

    # Valid but abusive: accepted, each starting one small job.
    st("accepted: seed u64::MAX on two assets",
       start(name="seed-max", assets=[synthetic(seed=1), synthetic(seed=2)], extra=vint(5, u64max)),
       "OK", starts_job=True)
    st("accepted: priority i32::MIN, keep u32::MAX, checkpoint every 1e308 s",
       start(name="extremes", model=plugin_model(priority=-(1 << 31)),
             extra=ld(7, dbl(2, 1e308) + vint(3, u32max))), "OK", starts_job=True)
    st("accepted: unicode name", start(name="日本語 ✓ \u202e"), "OK", starts_job=True)
    return c


# ----- running --------------------------------------------------------------------------


def call(channel, case, token, last_job=None):
    request = case.request(last_job or 0) if callable(case.request) else case.request
    md = case.metadata if case.metadata is not None else [("authorization", "Bearer " + token)]
    kw = dict(metadata=md, timeout=case.timeout)
    if case.compression is not None:
        kw["compression"] = case.compression
    raw = dict(request_serializer=None, response_deserializer=None)
    response = None
    try:
        if case.kind == "unary":
            response = channel.unary_unary(case.method, **raw)(request, **kw)
        elif case.kind == "unary_stream":
            for response in channel.unary_stream(case.method, **raw)(request, **kw):
                pass
        elif case.kind == "stream_unary":
            response = channel.stream_unary(case.method, **raw)(iter(request), **kw)
        else:
            for response in channel.stream_stream(case.method, **raw)(iter(request), **kw):
                pass
        return "OK", "", response
    except grpc.RpcError as e:
        return e.code().name, e.details() or "", None


def started_job(response):
    job_message = first_field(response or b"", 1)
    return first_field(job_message, 1) if isinstance(job_message, bytes) else None


def health(channel):
    try:
        response = channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
        return {1: "SERVING", 2: "NOT_SERVING"}.get(first_field(response, 1), "UNKNOWN")
    except grpc.RpcError as e:
        return "unreachable: " + e.code().name


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2:
            del data[at : at + rng.randint(1, 8)]
        elif op == 3:
            del data[at:]
        elif op == 4:
            data[at:at] = b"\xff" * 9 + b"\x01"
        elif data:
            piece = data[at : at + rng.randint(1, 16)]
            data[at:at] = piece * rng.randint(1, 64)
    return bytes(data)


def mutations(channel, token, job_id, count, seed):
    rng = random.Random(seed)
    bases = [
        (TS + "StartTraining", start(name="mutant", model=plugin_model(steps=1)), "unary"),
        (TS + "StartTraining", start(name="mutant", model=template_model(
            packed(1, [8]) + dbl(2, 0.01), steps=1)), "unary"),
        (TS + "ListTrainingJobs", packed(1, [4, 5]) + ld(2, "behaviour") + vint(6, 2)
         + vint(7, 10), "unary"),
        (TS + "GetTrainingStatus", job(job_id), "unary"),
        (TS + "GetTrainingHistory", job(job_id) + ld(2, "loss") + vint(3, 100), "unary"),
        (TS + "StopTraining", job(job_id) + vint(3, 1) + vint(4, 100), "unary"),
        (TS + "ResumeTraining", job(job_id), "unary"),
        (TS + "WatchTraining", job(job_id) + vint(2, 100), "unary_stream"),
        ("/tli.v1.PluginService/ListPlugins", b"", "unary"),
        ("/tli.v1.ResourceService/GetResources", b"", "unary"),
        ("/grpc.health.v1.Health/Check", ld(1, "tli.v1.TrainingService"), "unary"),
    ]
    histogram, failures, jobs = {}, [], []
    for n in range(count):
        method, base, kind = bases[n % len(bases)]
        case = Case("mutation %d" % n, method, mutate(rng, base), None, kind=kind, timeout=60)
        code, message, response = call(channel, case, token)
        histogram[code] = histogram.get(code, 0) + 1
        if code in HOST_FAILURE:
            failures.append({"method": method, "code": code, "message": message[:300],
                             "request_hex": case.request[:512].hex()})
        if code == "OK" and method.endswith("/StartTraining"):
            jobs.append(started_job(response))
    return histogram, failures, jobs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("--token", required=True)
    parser.add_argument("--job", type=int, required=True)
    parser.add_argument("--mutations", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    args = parser.parse_args()
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
               ("grpc.max_metadata_size", 1 << 20)]
    channel = grpc.insecure_channel(args.address, options=options)
    results, started = [], []
    began = time.monotonic()
    for case in corpus(args.token, args.job):
        if args.only not in case.name:
            continue
        t0 = time.monotonic()
        code, message, response = call(channel, case, args.token, started[-1] if started else None)
        job_id = started_job(response) if case.starts_job and code == "OK" else None
        if job_id is not None:
            started.append(job_id)
        results.append({"name": case.name, "method": case.method[:80], "expected": case.expected,
                        "got": code, "message": message[:300], "message_len": len(message),
                        "seconds": round(time.monotonic() - t0, 3), "started_job": job_id})
    histogram, failures, mutant_jobs = ({}, [], [])
    if args.mutations:
        histogram, failures, mutant_jobs = mutations(channel, args.token, args.job,
                                                     args.mutations, args.seed)
    status = health(channel)
    wrong = [r for r in results if r["got"] != r["expected"]]
    summary = {
        "cases": results,
        "wrong": wrong,
        "started_jobs": started + mutant_jobs,
        "mutations": {"tried": args.mutations, "codes": histogram, "host_failures": failures},
        "requests_tried": len(results) + args.mutations,
        "health": status,
        "seconds": round(time.monotonic() - began, 1),
    }
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0 if not wrong and not failures and status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
