/* Restoring a group's tables from their checkpoints (ps_ckpt.h): ps_open.c's hooks. */
#include "ps_ckpt.h"

#include "groups.h"
#include "ps_ckpt_file.h"
#include "ps_cluster.h"
#include "ps_msg-internal.h"

#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ps_ckpt_open_prepare(ps_table_t *t, const ps_table_spec_t *spec, uint64_t *start,
                         char *err, size_t err_size)
{
    *start = 0;
    if (!t->group_id || !groups_restored(t->ps->d, t->group_id))
        return 0;
    char dir[PATH_MAX], path[PATH_MAX], why[PATH_MAX + 256], rule[32], sync[32];
    if (ps_ckpt_state_dir(t->ps->d, dir, sizeof(dir)) < 0 ||
        ps_ckpt_path(path, sizeof(path), dir, t->uid, t->group, spec->name) < 0) {
        snprintf(err, err_size, "table '%s': group %s restores, but salusd has no state "
                 "directory for its checkpoints", spec->name, t->group);
        return -ENOENT;
    }
    ps_ckpt_header_t h;
    float *values = NULL;
    int rc = ps_ckpt_read(path, &h, &values, why, sizeof(why));
    if (rc == 0)
        rc = ps_ckpt_check_identity(&h, t->uid, t->group, spec->name, why, sizeof(why));
    if (rc < 0) {
        free(values);
        snprintf(err, err_size, "table '%s': cannot restore group %s: %s", spec->name, t->group,
                 why);
        return rc == -ENOENT ? -ENOENT : -EINVAL;
    }
    ps_rule_format(&spec->rule, rule, sizeof(rule));
    ps_sync_format(&spec->sync, sync, sizeof(sync));
    if (h.count != spec->count || strcmp(h.rule, rule) != 0 || strcmp(h.sync, sync) != 0) {
        snprintf(err, err_size, "table '%s': its checkpoint has %llu elements, rule %s, sync %s; "
                 "the open asks %llu, %s, %s", spec->name, (unsigned long long)h.count, h.rule,
                 h.sync, (unsigned long long)spec->count, rule, sync);
        free(values);
        return -EINVAL;
    }
    if (h.clock > (uint64_t)INT64_MAX) { /* (a table's clocks stay there: no wrap later) */
        snprintf(err, err_size, "table '%s': its checkpoint is at clock %llu, beyond the "
                 "last a table can start at (%lld)", spec->name, (unsigned long long)h.clock,
                 (long long)INT64_MAX);
        free(values);
        return -EINVAL;
    }
    free(t->restore_values);
    t->restore_values = values;
    t->start_clock = h.clock;
    *start = h.clock;
    LOG_INFO("ps: table '%s' of group %s restores from %s (clock %llu%s)", spec->name, t->group,
             path, (unsigned long long)h.clock, h.asp ? ", taken under asp" : "");
    return 0;
}

int ps_ckpt_open_agreed(const ps_table_t *t, const struct ps_ring_record_s *rec, char *err,
                        size_t err_size)
{
    if (!t->restore_values || rec->start == t->start_clock)
        return 0;
    snprintf(err, err_size, "table '%s' of group %s was created at clock %llu (by a node that "
             "did not restore it), not at its checkpoint's clock %llu: restore every node of "
             "the group (salusctl run --restore)", t->name, t->group,
             (unsigned long long)rec->start, (unsigned long long)t->start_clock);
    return -EINVAL;
}

int ps_ckpt_open_shards(ps_table_t *t, char *err, size_t err_size)
{
    if (!t->restore_values)
        return 0;
    for (uint32_t i = 0; i < t->layout.shards; i++) {
        if (!t->shards[i]) /* every replica held here: primary or standby */
            continue;
        uint64_t first, elems;
        ps_layout_shard(&t->layout, i, &first, &elems);
        int rc = ps_ckpt_load_shard(t, i, t->start_clock, t->restore_values + first, err,
                                    err_size);
        if (rc < 0)
            return rc;
    }
    if (!t->ring || ps_ring_size(t->ring) == 1) { /* no other server needs them */
        free(t->restore_values);
        t->restore_values = NULL;
    }
    return 0;
}

int ps_ckpt_open_sent(ps_table_t *t, const char *node)
{
    if (!t->restore_values)
        return 0;
    for (uint32_t i = 0; i < t->layout.shards; i++) {
        /* every replica of the shard starts from the file: the primary and its standbys */
        size_t set[PS_MAX_REPLICAS];
        uint32_t k = ps_ring_replicas(t->ring, t->name, i, t->replicas, set), j = 0;
        while (j < k && strcmp(ps_ring_name(t->ring, set[j]), node) != 0)
            j++;
        if (j == k)
            continue;
        uint64_t first, elems;
        ps_layout_shard(&t->layout, i, &first, &elems);
        wbuf_t w;
        ps_msg_begin(&w, MSG_SNAP_LOAD, t);
        ps_msg_put(&w, t->open_req, 8);
        ps_msg_put(&w, i, 4);
        ps_msg_put(&w, t->start_clock, 8);
        int rc = ps_msg_send(t->ps, node, &w, t->restore_values + first, elems * sizeof(float));
        if (rc < 0)
            return rc;
        t->opens_pending++;
    }
    return 0;
}

uint64_t ps_ckpt_start_clock(salusd_t *d, uint64_t handle)
{
    ps_t *ps = ps_of(d);
    for (ps_table_t *t = ps ? ps->tables : NULL; t; t = t->next)
        if (t->handle == handle)
            return t->start_clock;
    return 0;
}
