#!/usr/bin/env python3
"""The frames a cut-off leader would send late, for test_cluster_leader.sh:

  late_slots.py ADDR PORT KEYFILE NODE PEER TERM GROUP_KEY:EPOCH:SEQ...

Dials PEER's link port as NODE (the former leader, a member again, holding the cluster key),
proves the key as a daemon does (member_forge.dial), and sends one "slot" frame per argument:
the group's record key and epoch, the slot's sequence number (its high half: TERM, the
revision NODE led at) and "term" TERM, as a leader that kept granting after its lease ended
would have sent them. Prints "welcome" and "sent N" (exit 0), or why not (exit 1). What PEER
makes of them is read from its log by the test."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from member_forge import dial, send_requests  # noqa: E402


def main():
    addr, port, keyfile, node, peer, term = sys.argv[1:7]
    slots = []
    for arg in sys.argv[7:]:
        key, epoch, seq = arg.rsplit(":", 2)
        slots.append({"group": key, "epoch": int(epoch), "seq": int(seq), "iters": 1,
                      "term": int(term)})
    s, tagged = dial(addr, port, keyfile, node, peer)
    if s is None:
        print(tagged)
        return 1
    print("welcome", flush=True)
    # the peer answers nothing to a slot: the link stays a moment, then goes
    send_requests(s, tagged, "slot", slots, 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
