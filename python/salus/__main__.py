"""python -m salus VERB: what salusctl prints for status, ps, lanes, groups and policy, from
salus.Client's typed results (--json: the daemon's fields as JSON)."""
import argparse
import json
import sys

from . import Client, Error


def print_ps(jobs):
    # as salusctl ps: CONTAINER when some job runs in one, TARGET_MS, P99_MS, OVER when some
    # job is latency-critical, WAITING_FOR (last) when some job waits for admission
    containers = any(isinstance(j.container, str) for j in jobs)
    classes = any(isinstance(j.latency_target_ms, int) for j in jobs)
    reasons = any(isinstance(j.wait_reason, str) for j in jobs)
    print(f"{'ID':<5} {'NAME':<20} {'PID':<8} {'UID':<6} {'STATE':<8} {'GPU':<4} {'LANE':<5} "
          f"{'ITER':>7} {'MEM_MIB':>9} {'GPU_S':>9} {'WAIT_S':>9} {'GROUP:RANK':<16} "
          f"{'GANG_S':>6}" + (" CONTAINER" if containers else "") +
          (" TARGET_MS  P99_MS   OVER" if classes else "") + ("  WAITING_FOR" if reasons else ""))
    for j in jobs:
        gpu = str(j.gpu) if isinstance(j.gpu, int) else "-"
        if j.gpus and len(j.gpus) > 1:  # --gpus N: every one
            gpu = ",".join(str(g) for g in j.gpus)
        lane = str(j.lane) if isinstance(j.lane, int) else "-"
        group = f"{j.group}:{j.rank or 0}" if isinstance(j.group, str) else "-"
        print(f"{j.id:<5} {j.name:<20.20} {j.pid:<8} {j.uid:<6} {j.state:<8} {gpu:<4} "
              f"{lane:<5} {j.iterations:>7} {j.memory_bytes / 1048576.0:9.1f} "
              f"{j.gpu_time_ms / 1000.0:9.1f} {j.wait_time_ms / 1000.0:9.1f} {group:<16.16} "
              f"{j.gang_wait_ms / 1000.0:6.1f}" +
              ((" " + (j.container if isinstance(j.container, str) else "-")[:15])
               if containers else "") + _request_columns(j, classes) +
              (("  " + (j.wait_reason if isinstance(j.wait_reason, str) else "-"))
               if reasons else ""))


def _request_columns(j, classes):
    if not classes:
        return ""
    if not isinstance(j.latency_target_ms, int):
        return f" {'-':>9} {'-':>7} {'-':>6}"
    return (f" {j.latency_target_ms:9d} {(j.request_p99_us or 0) / 1000.0:7.1f} "
            f"{j.requests_over_target or 0:6d}")


def print_status(st):
    up = st.uptime_ms
    print(f"{st.server} (protocol {st.protocol}) on {st.socket}")
    print(f"  pid          {st.pid}")
    print(f"  uptime       {up // 1000}.{up % 1000 // 100} s")
    print(f"  device       {st.device}")
    for g in st.gpus:
        print(f"  gpu {g.index:<8} {g.name}, {g.total_bytes / 1048576.0:.0f} MiB, "
              f"{g.used_bytes / 1048576.0:.0f} MiB in chunks")
    print(f"  jobs         {st.jobs}")
    print(f"  connections  {st.connections}")


def print_lanes(lanes):
    print(f"{'GPU':<4} {'LANE':<5} {'SIZE_MIB':>10} {'ACTIVE':<7} JOBS")
    for lane in lanes:
        active = str(lane.active) if isinstance(lane.active, int) else "-"
        jobs = (" " + ",".join(str(j) for j in lane.jobs)) if lane.jobs else ""
        print(f"{lane.gpu:<4} {lane.lane:<5} {lane.size_bytes / 1048576.0:10.1f} {active:<7}"
              f"{jobs}")


def print_groups(groups):
    print(f"{'GROUP':<20} {'UID':<6} {'WORLD':>5} {'SYNC':<9} {'STATE':<8} {'GANG_S':>7}  "
          "FAILURE")
    for g in groups:
        print(f"{g.name:<20} {g.uid:<6} {g.world:>5} {g.sync:<9} {g.state:<8} "
              f"{g.gang_wait_ms / 1000.0:7.1f}  {g.failure or '-'}")
        for r in g.ranks:
            print(f"  rank {r.rank:<4} node {r.node or '-':<10} job {r.job_id or '-':<6} "
                  f"pid {r.pid or '-':<8} gpu {'-' if r.gpu is None else r.gpu:<3} "
                  f"{r.state:<13} gang {r.gang_wait_ms / 1000.0:.1f} s")
        for t in g.tables:
            print(f"  table {t.name:<16} count {t.count:<10} rule {t.rule:<10} sync {t.sync:<7} "
                  f"epoch {t.epoch:<6} shards {t.shards_here}/{t.shards} here, {t.bytes_here} "
                  f"bytes, done {t.done}, servers {t.servers}")
            raw = t.raw
            if isinstance(raw.get("failover_ms"), int):
                print(f"    last fail-over: its updates and reads recovered after "
                      f"{raw['failover_ms'] / 1000.0:.3f} s")
            if isinstance(raw.get("view"), int) and raw["view"] > 0:
                moved, shards = raw.get("shards_moved", 0), raw.get("shards", 0)
                print(f"    view {raw['view']}: servers {raw.get('view_servers', '-')}, "
                      f"{raw.get('replicas', 0)} replicas, {raw.get('primaries_here', 0)} "
                      f"primaries here; its changes moved {moved} of {shards} primaries "
                      f"({moved / shards if shards else 0.0:.3f}), "
                      f"{raw.get('replica_copies', 0)} replica copies")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m salus",
                                     description="salusd's state, as salusctl prints it")
    parser.add_argument("--socket", help="salusd's control socket (default: $SALUS_SOCKET or "
                        "the per-user default)")
    parser.add_argument("--json", action="store_true", help="the daemon's fields as JSON")
    parser.add_argument("verb", choices=["status", "ps", "lanes", "groups", "policy",
                                         "version"])
    parser.add_argument("name", nargs="?", help="policy: the policy to switch to")
    args = parser.parse_args(argv)
    client = Client(socket=args.socket)
    try:
        if args.verb == "version":
            print(client.version())
            return 0
        if args.verb == "policy":
            result = client.policy(args.name)
        else:
            result = getattr(client, args.verb)()
    except Error as e:
        print(f"python -m salus: {e.strerror}", file=sys.stderr)
        return 1
    if args.json:
        raw = [x.raw for x in result] if isinstance(result, list) else result.raw
        print(json.dumps(raw))
    elif args.verb == "ps":
        print_ps(result)
    elif args.verb == "status":
        print_status(result)
    elif args.verb == "lanes":
        print_lanes(result)
    elif args.verb == "groups":
        print_groups(result)
    else:
        print(f"policy {result.policy} (available: {' '.join(result.policies)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
