"""salus.ps tables from numpy on one node: 2 ranks under bsp, ssp:1 and asp, and the errors
as Python sees them; salus.Unavailable without salus; iteration marks; a torchrun worker that
is not a salus rank of its own refused."""
import json
import os
import subprocess
import sys

from conftest import HERE

RANK = os.path.join(HERE, "ps_rank.py")


def results(outs):
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def test_bsp_add_ranges_keys(daemon, work):
    r = results(daemon.ranks("py-bsp", 2, lambda k: [RANK, "bsp", work]))
    for res in r:
        print(res)
        # clock k: k * (1 + 2) everywhere, nothing missing (done == clock)
        assert res["pulls"] == [[1, 1, 3.0, 3.0], [2, 2, 6.0, 6.0], [3, 3, 9.0, 9.0]]
        clock, a = res["range_keys"]
        assert clock == 4
        # keys 1 and 3: 9 + 200; elements 8..15: 9 + 20; the rest 9
        assert a == [9, 209, 9, 209, 9, 9, 9, 9] + [29] * 8
        assert res["whole"] == [64, 9 * 64 + 400 + 20 * 8]
        assert res["replicas_env_after"] is None


def test_ssp_staleness_bounded(daemon, work):
    r = results(daemon.ranks("py-ssp", 2, lambda k: [RANK, "ssp", work], sync="ssp:1"))
    fast = r[0]
    print(r)
    assert max(fast["staleness"]) <= 1
    assert fast["waited"] > 0  # the slow rank held the fast one back
    assert all(res["current_clock"] == 8 for res in r)


def test_asp_no_wait(daemon, work):
    r = results(daemon.ranks("py-asp", 2, lambda k: [RANK, "asp", work], sync="asp"))
    for res in r:
        print(res)
        assert res["waited"] == 0
        assert res["final"] == [15.0, 15.0]


def test_federated_rounds(daemon, work):
    r = results(daemon.ranks("py-fed", 2, lambda k: [RANK, "fed", work]))
    for res in r:
        print(res)
        # round k open when pulled at clock k; both ranks chosen (K = N = 2), E = 1
        assert res["rounds"] == [[k, k, True, 2, 2, 1] for k in range(3)]
        assert res["pushed"] == [True] * 3
        assert all(abs(v - 5.0) <= 1e-5 for v in res["final"])


def test_errors(daemon, work):
    (res,) = results(daemon.ranks("py-err", 1, lambda k: [RANK, "errors", work]))
    for key, value in res.items():
        print(key, value)
    assert res["bad_name"][:2] == ["Error", 22] and "names" in res["bad_name"][2]
    assert res["bad_rule"][0] == "Error" and "nope" in res["bad_rule"][2]
    assert res["reopen_count"][0] == "Error" and res["reopen_count"][1] == 22
    assert res["key_out_of_range"][:2] == ["Error", 22]
    assert res["range"][0] == "ValueError" and "outside" in res["range"][2]
    assert res["dtype"][0] == "TypeError" and "float32" in res["dtype"][2]
    assert res["not_contiguous"][0] == "ValueError"
    assert res["read_only_pull"][0] == "ValueError" and "read-only" in res["read_only_pull"][2]
    assert res["read_only_push"] is None
    assert res["no_buffer"][0] == "TypeError"
    assert res["closed"][0] == "Error" and "closed" in res["closed"][2]


def test_unavailable_without_salus():
    code = ("import salus, numpy\n"
            "try:\n"
            "    salus.ps.Table.open('t', 4)\n"
            "except salus.Unavailable as e:\n"
            "    print('unavailable', e.errno, e)\n"
            "with salus.iteration():\n"
            "    pass\n"
            "print('iteration no-op', salus.job_stats())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    print(out.stdout, out.stderr)
    assert out.returncode == 0
    assert "unavailable 38" in out.stdout and "salusctl run" in out.stdout
    assert "iteration no-op None" in out.stdout


def test_iteration_marks(daemon):
    """salus.iteration() as decorator and context manager under salus: each begin waits for
    the job's turn, each end is counted at the next begin (as with salus.h's marks), so 4
    marked iterations of 20 ms show 3 in the shim's statistics before the exit."""
    code = ("import salus, time\n"
            "@salus.iteration()\n"
            "def step():\n"
            "    time.sleep(0.02)\n"
            "for _ in range(3):\n"
            "    step()\n"
            "with salus.iteration():\n"
            "    time.sleep(0.02)\n"
            "st = salus.job_stats()\n"
            "print('stats', st.job_id > 0, st.iterations, st.last_iteration_ns >= 20000000)\n")
    out = subprocess.run([daemon.salusctl, "run", "--name", "py-marks", "--", sys.executable,
                          "-c", code], env=daemon.env, capture_output=True, text=True,
                         timeout=60)
    print(out.stdout, out.stderr)
    assert out.returncode == 0
    assert "stats True 3 True" in out.stdout


def test_torchrun_worker_needs_its_own_run(monkeypatch):
    """A torchrun worker whose RANK is not its SALUS_RANK (every worker inherited one
    salusctl run) is refused, saying how to launch it; matching ones are taken."""
    import salus
    for k, v in {"SALUS_GROUP": "g", "SALUS_WORLD": "2", "SALUS_RANK": "0",
                 "TORCHELASTIC_RUN_ID": "x", "RANK": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(k, v)
    try:
        salus.rank_info()
        raise AssertionError("a torchrun worker of another rank was taken")
    except salus.Unavailable as e:
        print(e)
        assert "torchrun --no_python" in str(e)
    monkeypatch.setenv("RANK", "0")
    assert salus.rank_info() == salus.RankInfo("g", 2, 0, -1)
