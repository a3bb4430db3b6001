"""A rank of test_ps_numpy.py: salus.ps tables from numpy under one sync mode; prints one
JSON line of what it saw. Usage: ps_rank.py SCENARIO WORKDIR [ARGS]."""
import array
import json
import os
import sys
import time

import numpy as np

import salus
import salus.ps


def barrier(work, tag, rank, world):
    """Files as a barrier: each rank writes tag.rank and waits (bounded) for the others."""
    open(os.path.join(work, f"{tag}.{rank}"), "w").close()
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(work, f"{tag}.{r}")) for r in range(world)):
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier {tag}: the other ranks did not come within 60 s")
        time.sleep(0.02)


def bsp(work, info):
    """add under bsp: rank r pushes r + 1 everywhere, 3 clocks; after clock k every element
    holds k * (1 + 2); the same through keys and a torch-free array.array pull."""
    out = {"pulls": []}
    with salus.ps.Table.open("np-bsp", 64, rule="add", sync="bsp") as t:
        values = np.full(64, info.rank + 1, np.float32)
        w = np.zeros(64, np.float32)
        for _ in range(3):
            t.push(values)
            t.clock()
            read = t.pull(w)  # waits for the other rank's push of this clock
            out["pulls"].append([read.clock, read.done, float(w.min()), float(w.max())])
        # a range and keys: rank r adds 10 to elements 8..15 and 100 to keys 1 and 3
        t.push(np.full(8, 10, np.float32), offset=8)
        t.push_keys(np.array([1, 3], np.uint64), np.full(2, 100, np.float32))
        t.clock()
        a = array.array("f", bytes(4 * 16))
        read = t.pull(a)
        out["range_keys"] = [read.clock, list(a)]
        whole, read = t.pull()
        out["whole"] = [int(whole.size), float(whole.sum())]
    # replicas: SALUS_PS_REPLICAS for the open only
    with salus.ps.Table.open("np-r1", 4, replicas=1) as t:
        out["replicas_env_after"] = os.environ.get("SALUS_PS_REPLICAS")
    return out


def ssp(work, info):
    """sgd:1 under ssp:1; rank 1 sleeps each clock: the staleness rank 0 reads stays <= 1."""
    out = {"staleness": [], "waited": 0}
    with salus.ps.Table.open("np-ssp", 16, rule="sgd:1", sync="ssp:1") as t:
        w = np.zeros(16, np.float32)
        for _ in range(8):
            if info.rank == 1:
                time.sleep(0.15)
            t.push(np.ones(16, np.float32))
            t.clock()
            read = t.pull(w)
            out["staleness"].append(read.staleness)
            out["waited"] += int(read.waited)
        barrier(work, "ssp-end", info.rank, info.world)
        out["current_clock"] = t.current_clock
    return out


def asp(work, info):
    """add under asp: pulls never wait; once both ranks are done (a barrier of files) the
    state holds every push, 5 * (1 + 2) (polled, bounded)."""
    out = {"waited": 0}
    with salus.ps.Table.open("np-asp", 8, rule="add", sync="asp") as t:
        w = np.zeros(8, np.float32)
        for _ in range(5):
            t.push(np.full(8, info.rank + 1, np.float32))
            t.clock()
            read = t.pull(w)
            out["waited"] += int(read.waited)
        barrier(work, "asp-end", info.rank, info.world)
        deadline = time.monotonic() + 30
        while True:
            t.pull(w)
            if float(w[0]) == 15.0 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        out["final"] = [float(w.min()), float(w.max())]
    return out


def fed(work, info):
    """fedavg:2:2:1:1:drop: both ranks are each round's clients; rank r pushes the model + r + 1
    with r + 1 samples, so each round adds (1 * 1 + 2 * 2) / 3 = 5/3; after 3 rounds 5."""
    out = {"rounds": []}
    with salus.ps.Table.open("np-fed", 4, rule="fedavg:2:2:1:1:drop", sync="bsp") as t:
        model = np.zeros(4, np.float32)
        for _ in range(3):
            read = t.pull(model)
            st = t.state()
            out["rounds"].append([read.done, st.round, st.selected, st.clients, st.per_round,
                                  st.epochs])
            t.fed_push(st.round, model + (info.rank + 1), samples=info.rank + 1, work=1)
            after = t.state()  # pushed, or its push closed the round (the next one open)
            out.setdefault("pushed", []).append(after.pushed or after.round == st.round + 1)
            t.clock()
        t.pull(model)
        out["final"] = [float(v) for v in model]
    return out


def errors(work, info):
    """What errors look like from Python: each as (exception class, errno, message)."""
    seen = {}

    def catch(key, fn):
        try:
            fn()
            seen[key] = None
        except Exception as e:
            seen[key] = [type(e).__name__, getattr(e, "errno", None), str(e)]

    catch("bad_name", lambda: salus.ps.Table.open("bad name!", 4))
    catch("bad_rule", lambda: salus.ps.Table.open("err-rule", 4, rule="nope"))
    t = salus.ps.Table.open("err-t", 4, rule="add", sync="bsp")
    catch("reopen_count", lambda: salus.ps.Table.open("err-t", 5, rule="add", sync="bsp"))
    catch("key_out_of_range", lambda: t.push_keys([9], np.ones(1, np.float32)))
    catch("range", lambda: t.pull(np.zeros(8, np.float32)))
    catch("dtype", lambda: t.push(np.ones(4, np.float64)))
    catch("not_contiguous", lambda: t.push(np.ones(8, np.float32)[::2]))
    read_only = np.ones(4, np.float32)
    read_only.flags.writeable = False
    catch("read_only_pull", lambda: t.pull(read_only))
    catch("read_only_push", lambda: t.push(read_only))  # fine: a push only reads
    catch("no_buffer", lambda: t.push([1.0, 2.0]))
    t.close()
    catch("closed", lambda: t.clock())
    t.close()  # a second close does nothing
    return seen


if __name__ == "__main__":
    scenario, work = sys.argv[1], sys.argv[2]
    info = salus.rank_info()
    result = globals()[scenario](work, info)
    print(json.dumps({"rank": info.rank, **result}), flush=True)
