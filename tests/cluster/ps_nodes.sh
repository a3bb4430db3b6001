# shellcheck shell=bash
# Helpers of the parameter-server cluster tests (test_cluster_ps*.sh): sourced after lib.sh
# and nodes.sh.
#   ps_rank I GROUP WORLD RANK TAG CMD...  CMD as rank RANK of GROUP on node I under salusctl
#                                run, in the background ($PS_ENV: VAR=VALUE words put in its
#                                environment); output $WORK/TAG.out and .err, pid PID_TAG
#   pid_of TAG                   PID_TAG
#   etcd_range I PREFIX          every key under PREFIX: lines "KEY CREATE_REVISION VALUE"
#   view_of I GROUP TABLE        the table's view record (P/psv/UID/GROUP/EPOCH/TABLE, JSON) as
#                                node I reads etcd; "" when there is none
#   view_epoch I GROUP TABLE     the EPOCH in the key of the table's view record
#   ring_epoch I GROUP TABLE     the create revision of the table's ring record
#                                (P/ps/UID/GROUP/GEPOCH/TABLE): the table's epoch
#   views_check I GROUP TABLE... each table has a view whose key's EPOCH is its ring record's
#                                epoch (fails saying which keys etcd holds otherwise)
#   views_gone I GROUP           waits (bounded) until the group's views are gone from etcd
#   view_servers JSON            its servers, comma-separated (sorted, as the record keeps them)
#   view_replicas JSON           its replica count
#   table_field I GROUP TABLE FIELD  FIELD of the table in `salusctl groups --json` on node I
#   ranks_wait SECONDS TAG...    waits (bounded) until the ranks have exited, and checks each
#                                exited 0; on a timeout shows their last lines and fails
PS_PREFIX=/salus
# shellcheck disable=SC2034 # used by the tests that source this
PS_CHECK=(python3 "$(dirname "${BASH_SOURCE[0]}")/ps_failover.py")

ps_rank() {
    local i="$1" group="$2" world="$3" rank="$4" tag="$5"
    shift 5
    node_argv "$i"
    # shellcheck disable=SC2086 # PS_ENV: VAR=VALUE words
    "${NODE_ARGV[@]}" env ${PS_ENV:-} "$SALUSCTL" run --name "$group.$rank" --group "$group" \
        --world "$world" --rank "$rank" -- "$@" >"$WORK/$tag.out" 2>"$WORK/$tag.err" &
    RANK_PIDS+=($!)
    eval "PID_$tag=$!"
}
pid_of() { eval "echo \$PID_$1"; }

etcd_range() {
    local key end
    key=$(printf '%s' "$2" | base64 -w0)
    end=$(python3 -c 'import base64,sys; p=sys.argv[1].encode(); print(base64.b64encode(p[:-1] + bytes([p[-1] + 1])).decode())' "$2")
    etcd_curl "$1" /v3/kv/range "{\"key\":\"$key\",\"range_end\":\"$end\"}" | python3 -c '
import base64, json, sys
for kv in json.load(sys.stdin).get("kvs", []):
    print(base64.b64decode(kv["key"]).decode(), kv.get("create_revision", "0"),
          base64.b64decode(kv.get("value", "")).decode())'
}

view_of() {
    etcd_range "$1" "$PS_PREFIX/psv/$(id -u)/$2/" 2>/dev/null |
        awk -v t="/$3" '{ k = $1; if (substr(k, length(k) - length(t) + 1) == t) { $1 = ""; $2 = ""; sub(/^  /, ""); print } }'
}
view_epoch() {
    etcd_range "$1" "$PS_PREFIX/psv/$(id -u)/$2/" 2>/dev/null |
        awk -v p="$PS_PREFIX/psv/$(id -u)/$2/" -v t="/$3" '{ k = $1; if (substr(k, length(k) - length(t) + 1) == t) { k = substr(k, length(p) + 1); sub(/\/.*/, "", k); print k } }'
}
ring_epoch() {
    etcd_range "$1" "$PS_PREFIX/ps/$(id -u)/$2/" 2>/dev/null | awk -v t="/$3" '{ k = $1; if (substr(k, length(k) - length(t) + 1) == t) print $2 }'
}
views_check() {
    local i="$1" group="$2" t te ve
    shift 2
    for t in "$@"; do
        te=$(ring_epoch "$i" "$group" "$t")
        [ -n "$te" ] || fail "no ring record of table $t of $group in etcd"
        ve=$(view_epoch "$i" "$group" "$t")
        [ "$ve" = "$te" ] || fail "the view of table $t of $group is not at $PS_PREFIX/psv/$(id -u)/$group/$te/$t" \
            "(EPOCH = the table's ring-record epoch, its create revision): etcd holds" \
            "$(etcd_range "$i" "$PS_PREFIX/" | grep -F "/$group/" | cut -d' ' -f1,2 | paste -sd' ')"
    done
}
views_gone() {
    wait_until 15 '[ -z "$(etcd_range '"$1"' "$PS_PREFIX/psv/$(id -u)/'"$2"'/")" ]' ||
        fail "the views of $2 outlived the group: $(etcd_range "$1" "$PS_PREFIX/psv/$(id -u)/$2/" | cut -d' ' -f1,2 | paste -sd' ')"
}
view_servers() {
    python3 -c 'import json, sys; print(",".join(json.loads(sys.argv[1])["servers"]))' "$1" 2>/dev/null
}
view_replicas() {
    python3 -c 'import json, sys; print(json.loads(sys.argv[1])["replicas"])' "$1" 2>/dev/null
}

table_field() {
    ctl "$1" groups --json 2>/dev/null | python3 -c '
import json, sys
for g in json.load(sys.stdin):
    if g["name"] == sys.argv[1]:
        for t in g.get("tables", []):
            if t["name"] == sys.argv[2]:
                print(t[sys.argv[3]])' "$2" "$3" "$4"
}

ranks_wait() {
    local seconds="$1" tag rc pids=()
    shift
    for tag in "$@"; do pids+=("$(pid_of "$tag")"); done
    wait_until "$seconds" all_exited "${pids[@]}" || {
        for tag in "$@"; do
            echo "--- $tag" >&2
            tail -n 3 "$WORK/$tag.out" "$WORK/$tag.err" >&2
            [ ! -f "$WORK/$tag.log" ] || tail -n 2 "$WORK/$tag.log" >&2
        done
        fail "the ranks $* did not end within $seconds s"
    }
    for tag in "$@"; do
        rc=0
        wait "$(pid_of "$tag")" || rc=$?
        [ "$rc" -eq 0 ] || fail "rank $tag exited $rc: $(tail -n 5 "$WORK/$tag.out" "$WORK/$tag.err")"
    done
}

# PS_KEEP_LOGS=DIR (when debugging): the nodes' salusd logs and the ranks' files are copied to
# DIR when the test exits, before the cleanup removes them
ps_nodes_cleanup() {
    if [ -n "${PS_KEEP_LOGS:-}" ]; then
        mkdir -p "$PS_KEEP_LOGS" && cp -r "$WORK"/. "$PS_KEEP_LOGS"/ 2>/dev/null
    fi
    nodes_cleanup
}
trap ps_nodes_cleanup EXIT
