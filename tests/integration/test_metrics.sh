#!/usr/bin/env bash
# The Prometheus endpoint (--metrics): off by default, clear errors on bad addresses, valid
# text format (every line parsed), numbers that agree with salusctl ps/status --json, 404 and
# 405 elsewhere, and malformed HTTP that leaves the daemon serving. Loopback only.
. "$(dirname "$0")/lib.sh"

MLP="$BIN/salus-mlp"
SYNTH="$BIN/salus-synth"

status_field() { # status_field FIELD: prints it, or nothing when absent
    "$SALUSCTL" status --json | python3 -c '
import json, sys
v = json.load(sys.stdin).get(sys.argv[1])
print("" if v is None else v)' "$1"
}

# Listening TCP sockets of a process (from /proc/net/tcp{,6}), one "ADDR:PORT" a line.
listening_tcp() {
    python3 - "$1" <<'PY'
import os, sys
pid = sys.argv[1]
inodes = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if link.startswith("socket:["):
        inodes.add(link[8:-1])
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table) as f:
        next(f)
        for line in f:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                print(cols[1])
PY
}

# --- bad addresses: exit 2 with a message, before anything starts -------------------
for bad in "nonsense" "127.0.0.1" "127.0.0.1:99999" "::1:9400" "localhost:9400" "127.0.0.1:x"; do
    rc=0
    "$SALUSD" --foreground --socket "$WORK/bad.sock" --metrics "$bad" >"$WORK/bad.out" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "--metrics '$bad': exit status $rc, expected 2"
    grep -q -- "--metrics" "$WORK/bad.out" || fail "--metrics '$bad': no message: $(cat "$WORK/bad.out")"
done
printf 'metrics = 127.0.0.1:port\n' >"$WORK/bad.conf"
rc=0
"$SALUSD" --foreground --socket "$WORK/bad.sock" --config "$WORK/bad.conf" >"$WORK/bad.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "metrics from a config file: exit status $rc, expected 2"
[ ! -e "$WORK/bad.sock" ] || fail "salusd with a bad --metrics left a socket behind"
pass "bad --metrics values (command line and config file) exit 2: $(head -1 "$WORK/bad.out")"

# --- off by default: no TCP listener, no metrics field --------------------------------
start_daemon
[ -z "$(status_field metrics)" ] || fail "status reports metrics without --metrics"
[ -z "$(listening_tcp "$DAEMON_PID")" ] || fail "salusd without --metrics listens on TCP: $(listening_tcp "$DAEMON_PID")"
stop_daemon
pass "without --metrics: no listening TCP socket, no metrics field in status"

# --- on: ephemeral port on 127.0.0.1 --------------------------------------------------
start_daemon --metrics 127.0.0.1:0 --metrics-job-labels
ADDR=$(status_field metrics)
case "$ADDR" in
127.0.0.1:[1-9]*) ;;
*) fail "status metrics field: '$ADDR'" ;;
esac
[ "$(listening_tcp "$DAEMON_PID" | wc -l)" -eq 1 ] || fail "expected one TCP listener: $(listening_tcp "$DAEMON_PID")"
grep -q "metrics: Prometheus text at http://$ADDR/metrics" "$WORK/salusd.log" || fail "bound address not logged"
URL="http://$ADDR/metrics"
pass "--metrics 127.0.0.1:0 bound $ADDR (logged, in status --json)"

# the same port again: a clear error, exit 1
rc=0
"$SALUSD" --foreground --socket "$WORK/second.sock" --metrics "$ADDR" >"$WORK/second.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "cannot listen on $ADDR" "$WORK/second.out" ||
    fail "second salusd on $ADDR: rc=$rc $(cat "$WORK/second.out")"
pass "a port in use is refused: $(grep -o 'cannot listen.*' "$WORK/second.out")"

# two jobs to completion (names that need escaping), one that keeps running
"$SALUSCTL" run --name 'mlp "quoted"' -- "$MLP" --iterations 20 >"$WORK/mlp1" 2>&1 || fail "mlp 1: $(cat "$WORK/mlp1")"
"$SALUSCTL" run --name 'back\slash' -- "$MLP" --iterations 20 >"$WORK/mlp2" 2>&1 || fail "mlp 2: $(cat "$WORK/mlp2")"
"$SALUSCTL" run --name long -- "$SYNTH" --gpu-ms 5 --iterations 100000 >"$WORK/long" 2>&1 &
LONG=$!
long_progressed() { # sets n: the long job's iterations
    n=$("$SALUSCTL" ps --json | python3 -c '
import json, sys
print(sum(j["iterations"] for j in json.load(sys.stdin) if j["name"] == "long"))')
    [ "$n" -ge 2 ]
}
wait_until 10 long_progressed || true
[ "$n" -ge 2 ] || fail "the long job made no progress: $(cat "$WORK/long")"

# The checker: parses every line of the exposition strictly, then compares it with ps/status
# snapshots taken before and after the scrape. Finished jobs must agree exactly; a running
# job's counters must lie between the two snapshots.
cat >"$WORK/check.py" <<'PY'
import decimal, json, re, subprocess, sys, urllib.request

url, ctl = sys.argv[1], sys.argv[2]
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}

def ctl_json(*args):
    return json.loads(subprocess.run([ctl, *args, "--json"], check=True, capture_output=True,
                                     text=True).stdout)

def unescape(text, allowed):
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in allowed:
                raise ValueError(f"bad escape in {text!r}")
            out.append({"\\": "\\", "n": "\n", '"': '"'}[text[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)

def parse_labels(text, pos, lineno):
    """text[pos] is '{'; returns (labels, position after '}')."""
    labels, pos = {}, pos + 1
    while True:
        if text[pos] == "}":
            return labels, pos + 1
        m = LABEL_NAME.match(text, pos)
        assert m, f"line {lineno}: bad label name at {text[pos:]!r}"
        name, pos = m.group(0), m.end()
        assert not name.startswith("__"), f"line {lineno}: reserved label {name}"
        assert text[pos:pos + 2] == '="', f"line {lineno}: expected =\" after {name}"
        pos += 2
        raw = []
        while text[pos] != '"':
            assert text[pos] != "\n", f"line {lineno}: raw newline in a label value"
            if text[pos] == "\\":
                raw.append(text[pos:pos + 2])
                pos += 2
            else:
                raw.append(text[pos])
                pos += 1
        pos += 1
        assert name not in labels, f"line {lineno}: label {name} twice"
        labels[name] = unescape("".join(raw), '\\"n')
        if text[pos] == ",":
            pos += 1
        else:
            assert text[pos] == "}", f"line {lineno}: expected , or }} at {text[pos:]!r}"

def parse(body):
    """Strict text format 0.0.4 parser: returns {family: {"type", "help", "samples"}}."""
    text = body.decode("utf-8")  # strict: invalid UTF-8 raises
    assert text.endswith("\n"), "the exposition must end with a line feed"
    families, current, seen_series, closed = {}, None, set(), set()
    for lineno, line in enumerate(text[:-1].split("\n"), 1):
        assert line, f"line {lineno}: empty line"
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                assert NAME.fullmatch(name), f"line {lineno}: bad metric name {name!r}"
                fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
                assert not fam["samples"], f"line {lineno}: {parts[1]} after samples of {name}"
                assert name not in closed, f"line {lineno}: family {name} not contiguous"
                if current and current != name:
                    closed.add(current)
                current = name
                if parts[1] == "HELP":
                    assert fam["help"] is None, f"line {lineno}: second HELP for {name}"
                    fam["help"] = unescape(parts[3] if len(parts) > 3 else "", "\\n")
                else:
                    assert fam["type"] is None, f"line {lineno}: second TYPE for {name}"
                    assert len(parts) == 4 and parts[3] in TYPES, f"line {lineno}: bad TYPE"
                    fam["type"] = parts[3]
            continue  # any other comment
        m = NAME.match(line)
        assert m, f"line {lineno}: bad sample {line!r}"
        name, pos = m.group(0), m.end()
        labels = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = parse_labels(line, pos, lineno)
        rest = line[pos:]
        assert rest.startswith(" "), f"line {lineno}: no space before the value"
        fields = rest.split()
        assert 1 <= len(fields) <= 2, f"line {lineno}: expected value [timestamp]"
        assert FLOAT.fullmatch(fields[0]), f"line {lineno}: bad value {fields[0]!r}"
        if len(fields) == 2:
            assert re.fullmatch(r"-?[0-9]+", fields[1]), f"line {lineno}: bad timestamp"
        assert name in families, f"line {lineno}: sample of {name} before its TYPE"
        assert name == current, f"line {lineno}: sample of {name} outside its family"
        series = (name, tuple(sorted(labels.items())))
        assert series not in seen_series, f"line {lineno}: duplicate series {series}"
        seen_series.add(series)
        families[name]["samples"].append((labels, fields[0]))
    for name, fam in families.items():
        assert fam["help"] and fam["type"], f"{name}: every family needs HELP and TYPE"
        if fam["type"] == "counter":
            assert name.endswith("_total"), f"{name}: a counter's name ends in _total"
    return families

def one(families, name, **labels):
    found = [v for l, v in families[name]["samples"] if all(l.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]

def seconds_to_ms(value):
    return int(decimal.Decimal(value) * 1000)

st1, ps1, ln1 = ctl_json("status"), ctl_json("ps"), ctl_json("lanes")
with urllib.request.urlopen(url, timeout=10) as r:
    assert r.status == 200
    ctype = r.headers["Content-Type"]
    body = r.read()
ln2, ps2, st2 = ctl_json("lanes"), ctl_json("ps"), ctl_json("status")
assert ctype.startswith("text/plain; version=0.0.4"), ctype
fams = parse(body)
lines = body.count(b"\n")

assert one(fams, "salus_build_info", version=st1["server"].split()[-1]) == "1"
policy = fams["salus_policy_info"]["samples"]
assert len(policy) == 1 and policy[0][1] == "1", policy
if "policy" in st1 and st1.get("policy") == st2.get("policy"):
    assert policy[0][0]["policy"] == st1["policy"], (policy, st1["policy"])

# GPUs
for g1, g2 in zip(st1["gpus"], st2["gpus"]):
    gpu = str(g1["index"])
    lane_sums = [sum(l["size_bytes"] for l in ln if l["gpu"] == g1["index"]) for ln in (ln1, ln2)]
    v = int(one(fams, "salus_gpu_memory_lane_bytes", gpu=gpu))
    assert min(lane_sums) <= v <= max(lane_sums), ("lane bytes", v, lane_sums)
    assert int(one(fams, "salus_gpu_memory_capacity_bytes", gpu=gpu)) <= g1["total_bytes"]
    assert int(one(fams, "salus_gpu_memory_total_bytes", gpu=gpu)) == g1["total_bytes"]
    for metric, field in (("salus_gpu_memory_reserved_bytes", "reserved_bytes"),
                          ("salus_gpu_memory_used_bytes", "used_bytes")):
        v = int(one(fams, metric, gpu=gpu))
        assert min(g1[field], g2[field]) <= v <= max(g1[field], g2[field]), (metric, v, g1, g2)
    busy = fams["salus_gpu_busy_seconds_total"]["samples"]
    if st1["device"] == "simgpu":
        ms = seconds_to_ms(one(fams, "salus_gpu_busy_seconds_total", gpu=gpu))
        assert g1["busy_ms"] <= ms <= g2["busy_ms"], (ms, g1["busy_ms"], g2["busy_ms"])
        u = float(one(fams, "salus_gpu_utilization", gpu=gpu))
        assert 0.0 <= u <= 1.0, u
    else:
        assert not busy, "busy time on a real GPU"

# jobs
by1 = {j["id"]: j for j in ps1}
by2 = {j["id"]: j for j in ps2}
ids = {int(l["job_id"]) for l, _ in fams["salus_job_iterations_total"]["samples"]}
assert ids == set(by1) == set(by2), (ids, set(by1), set(by2))
exact = 0
for jid in ids:
    a, b = by1[jid], by2[jid]
    key = {"job_id": str(jid)}
    labels = [l for l, _ in fams["salus_job_iterations_total"]["samples"] if l["job_id"] == str(jid)][0]
    assert labels["name"] == a["name"] and labels["uid"] == str(a["uid"]), (labels, a)
    states = {l["state"]: v for l, v in fams["salus_job_state"]["samples"] if l["job_id"] == str(jid)}
    assert set(states) == {"waiting", "running", "paused", "done", "failed", "killed", "ended"}, states
    assert sorted(states.values()) == ["0", "0", "0", "0", "0", "0", "1"], states
    state = [s for s, v in states.items() if v == "1"][0]
    iters = int(one(fams, "salus_job_iterations_total", **key))
    gpu_ms = seconds_to_ms(one(fams, "salus_job_gpu_seconds_total", **key))
    mem = int(one(fams, "salus_job_memory_bytes", **key))
    values = {"iterations": iters, "gpu_time_ms": gpu_ms, "memory_bytes": mem,
              "budget_bytes": int(one(fams, "salus_job_memory_budget_bytes", **key)),
              "persistent_bytes": int(one(fams, "salus_job_persistent_bytes", **key)),
              "ephemeral_peak_bytes": int(one(fams, "salus_job_ephemeral_peak_bytes", **key))}
    if a["state"] in ("done", "failed", "killed", "ended"):
        assert state == a["state"] == b["state"], (state, a, b)
        for field, v in values.items():
            assert v == a[field] == b[field], (jid, field, v, a[field], b[field])
        exact += 1
    else:
        assert state in (a["state"], b["state"]), (jid, state, a["state"], b["state"])
        for field in ("iterations", "gpu_time_ms", "memory_bytes"):
            assert a[field] <= values[field] <= b[field], (jid, field, values[field], a, b)
queued = [sum(j["state"] in ("waiting", "paused") for j in ps) for ps in (ps1, ps2)]
q = int(one(fams, "salus_queue_length"))
assert min(queued) <= q <= max(queued), (q, queued)
print(f"{lines} lines, {len(fams)} families parsed; {len(ids)} jobs ({exact} compared exactly)")
PY

out=$(python3 "$WORK/check.py" "$URL" "$SALUSCTL" 2>&1) || fail "metrics check while a job runs: $out"
pass "scrape while a job runs: $out"
curl_body=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$URL")
grep -q '^salus_job_iterations_total{job_id="[0-9]*",name="mlp \\"quoted\\"",uid="[0-9]*"} 20$' <<<"$curl_body" ||
    fail "escaped job name not found"
grep -q '^salus_job_iterations_total{job_id="[0-9]*",name="back\\\\slash",uid="[0-9]*"} 20$' <<<"$curl_body" ||
    fail "escaped backslash not found"
pass "job names are escaped: $(grep -c '^salus_job_iterations_total' <<<"$curl_body") jobs listed"

# --- HTTP: other paths, methods, HEAD --------------------------------------------------
python3 - "$ADDR" <<'PY' || fail "HTTP paths and methods"
import http.client, sys
host, port = sys.argv[1].rsplit(":", 1)
def req(method, path):
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.headers, body
for path in ("/", "/metric", "/metrics/", "/metricsx", "/../metrics", "/favicon.ico"):
    status, _, _ = req("GET", path)
    assert status == 404, (path, status)
status, headers, _ = req("POST", "/metrics")
assert status == 405 and headers["Allow"] == "GET, HEAD", (status, headers)
status, headers, body = req("HEAD", "/metrics")
assert status == 200 and body == b"" and headers["Content-Type"].startswith("text/plain; version=0.0.4"), (status, body)
status, _, body = req("GET", "/metrics?name[]=x")
assert status == 200 and b"salus_queue_length" in body, status
PY
pass "other paths get 404, POST gets 405 (Allow: GET, HEAD), HEAD has no body, a query is ignored"

# --- malformed HTTP: the daemon keeps serving ------------------------------------------
python3 - "$ADDR" <<'PY' || fail "malformed requests"
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
port = int(port)
cases = [
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET /metrics HTTP/9.9\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000,
    b"GET /metrics HTTP/1.1\r\n" + b"X-Long: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /" + b"m" * 70000 + b" HTTP/1.1\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
    b"\x00\xff\xfe\x80" * 256,
    b"GET /%00%ff HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n",          # never finished
    b"",                                               # connect and close
]
for data in cases:
    s = socket.create_connection((host, port), timeout=5)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
    except OSError:
        pass  # reset by the server: fine
    finally:
        s.close()
# many requests pipelined on one connection
s = socket.create_connection((host, port), timeout=10)
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20 + b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
s.close()
assert data.count(b"HTTP/1.1 200 OK") == 21, data.count(b"HTTP/1.1 200 OK")
PY
kill -0 "$DAEMON_PID" || fail "salusd died on malformed HTTP"
"$SALUSCTL" status >/dev/null || fail "salusd stopped answering its socket after malformed HTTP"
python3 -c 'import sys, urllib.request; assert urllib.request.urlopen(sys.argv[1]).status == 200' "$URL" ||
    fail "/metrics no longer answers after malformed HTTP"
pass "malformed and pipelined HTTP requests: salusd still answers /metrics and its socket"

# --- every job finished: all values agree exactly -------------------------------------
long_pid=$("$SALUSCTL" ps --json | python3 -c '
import json, sys
print([j["pid"] for j in json.load(sys.stdin) if j["name"] == "long"][0])')
kill "$long_pid" 2>/dev/null || true  # the job itself; salusctl run then exits
wait "$LONG" 2>/dev/null || true
none_live() { # sets live: jobs not ended yet
    live=$("$SALUSCTL" ps --json | python3 -c '
import json, sys
print(sum(j["state"] not in ("done", "failed", "killed", "ended") for j in json.load(sys.stdin)))')
    [ "$live" -eq 0 ]
}
wait_until 5 none_live || true
[ "$live" -eq 0 ] || fail "the long job did not end"
out=$(python3 "$WORK/check.py" "$URL" "$SALUSCTL" 2>&1) || fail "metrics check after the jobs ended: $out"
grep -q "(3 compared exactly)" <<<"$out" || fail "expected 3 exact comparisons: $out"
pass "after the jobs ended: $out"

# shutdown with HTTP connections still open (one idle, one mid-request): nothing leaks
python3 - "$ADDR" "$WORK/held" <<'PY' &
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
idle = socket.create_connection((host, int(port)))
partial = socket.create_connection((host, int(port)))
partial.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
open(sys.argv[2], "w").close()
time.sleep(30)
PY
HOLDER=$!
wait_until 5 '[ -e "$WORK/held" ]' || true
stop_daemon
kill "$HOLDER" 2>/dev/null || true
wait "$HOLDER" 2>/dev/null || true
pass "salusd with --metrics stops cleanly (exit 0) with HTTP connections open"
