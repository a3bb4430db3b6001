/* Access control (see access.h). */
#include "access.h"

#include "registry.h"
#include "sched.h"

#include "log.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

int access_socket_mode(salusd_t *d, const char *path)
{
    const char *group = d->config.allow_group;
    if (!group[0]) {
        if (chmod(path, 0666) < 0) {
            LOG_ERROR("chmod 0666 %s: %s", path, strerror(errno));
            return -errno;
        }
        return 0;
    }
    struct group *g = getgrnam(group);
    if (!g) {
        LOG_ERROR("allow-group %s: no such group", group);
        return -ENOENT;
    }
    if (chown(path, (uid_t)-1, g->gr_gid) < 0 || chmod(path, 0660) < 0) {
        LOG_ERROR("giving %s to group %s (0660): %s", path, group, strerror(errno));
        return -errno;
    }
    return 0;
}

static int in_group(const char *name, uid_t uid, gid_t primary_gid)
{
    struct group *g = name[0] ? getgrnam(name) : NULL;
    if (!g)
        return 0;
    gid_t admin = g->gr_gid;
    if (primary_gid == admin)
        return 1;
    struct passwd *pw = getpwuid(uid);
    if (!pw)
        return 0;
    int n = 64;
    gid_t *groups = malloc(sizeof(*groups) * (size_t)n);
    if (!groups)
        return 0;
    if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0) {
        gid_t *more = n > 64 && n <= 65536 ? realloc(groups, sizeof(*groups) * (size_t)n) : NULL;
        if (!more || getgrouplist(pw->pw_name, pw->pw_gid, more, &n) < 0) {
            free(more ? more : groups);
            return 0;
        }
        groups = more;
    }
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        found = groups[i] == admin;
    free(groups);
    return found;
}

int access_is_admin(conn_t *c)
{
    if (c->uid == 0 || c->uid == geteuid())
        return 1;
    /* cached for the connection's life: salusctl's connections last one request */
    if (c->access == 0) {
        const char *admins = c->daemon->config.admin_group;
        c->access = in_group(admins, c->uid, c->gid) ? 1 : 2;
        LOG_DEBUG("uid %u is %sin group %s", (unsigned)c->uid, c->access == 1 ? "" : "not ",
                  admins);
    }
    return c->access == 1;
}

int access_may_control(conn_t *c, uid_t owner_uid)
{
    return c->uid == owner_uid || access_is_admin(c);
}

static int visible_id(conn_t *c, const msgpack_object *o)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return 0;
    job_t *job = registry_find(c->daemon->registry, o->via.u64);
    return job && access_may_control(c, job->uid);
}

void access_pack_lanes(conn_t *c, msgpack_packer *pk)
{
    salusd_t *d = c->daemon;
    if (access_is_admin(c)) {
        sched_pack_lanes(d, pk);
        return;
    }
    /* sched.c packs every job: re-pack its listing without the others' job ids */
    msgpack_sbuffer sb;
    msgpack_packer tmp;
    msgpack_unpacked u;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&tmp, &sb, msgpack_sbuffer_write);
    msgpack_unpacked_init(&u);
    sched_pack_lanes(d, &tmp);
    if (msgpack_unpack_next(&u, sb.data, sb.size, NULL) != MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_ARRAY) {
        msgpack_pack_array(pk, 0);
        goto out;
    }
    const msgpack_object_array *lanes = &u.data.via.array;
    msgpack_pack_array(pk, lanes->size);
    for (uint32_t i = 0; i < lanes->size; i++) {
        const msgpack_object *lane = &lanes->ptr[i];
        if (lane->type != MSGPACK_OBJECT_MAP) {
            msgpack_pack_nil(pk);
            continue;
        }
        msgpack_pack_map(pk, lane->via.map.size);
        for (uint32_t k = 0; k < lane->via.map.size; k++) {
            const msgpack_object_kv *kv = &lane->via.map.ptr[k];
            msgpack_pack_object(pk, kv->key);
            int is_jobs = kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 4 &&
                          memcmp(kv->key.via.str.ptr, "jobs", 4) == 0;
            int is_active = kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 6 &&
                            memcmp(kv->key.via.str.ptr, "active", 6) == 0;
            if (is_jobs && kv->val.type == MSGPACK_OBJECT_ARRAY) {
                uint32_t n = 0;
                for (uint32_t j = 0; j < kv->val.via.array.size; j++)
                    n += visible_id(c, &kv->val.via.array.ptr[j]);
                msgpack_pack_array(pk, n);
                for (uint32_t j = 0; j < kv->val.via.array.size; j++)
                    if (visible_id(c, &kv->val.via.array.ptr[j]))
                        msgpack_pack_object(pk, kv->val.via.array.ptr[j]);
            } else if (is_active && kv->val.type != MSGPACK_OBJECT_NIL) {
                if (visible_id(c, &kv->val))
                    msgpack_pack_object(pk, kv->val);
                else
                    msgpack_pack_nil(pk);
            } else {
                msgpack_pack_object(pk, kv->val);
            }
        }
    }
out:
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}
