/* salusctl: the command-line client of salusd. A table of verbs; exit codes:
 * 0 success, 1 the daemon failed or could not be reached, 2 usage error. */
#include "client.h"
#include "ctl.h"
#include "json.h"
#include "paths.h"
#include "policy.h"
#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct verb_s {
    const char *name;
    int min_args, max_args;   /* max_args < 0: everything after the verb is its own */
    int (*run)(ctl_t *ctl, int argc, char **argv);
    const char *usage;
    const char *help; /* policy's ends with the policies' names, from their registry */
} verb_t;

static int verb_help(ctl_t *ctl, int argc, char **argv);

/* Connects and sends op with an optional {key: value} body; the reply lands in *reply. */
static int call_with(ctl_t *ctl, const char *op, const char *key, const char *value,
                     proto_msg_t *reply)
{
    salus_client_t c;
    if (ctl_open(ctl, &c) != EXIT_OK)
        return EXIT_DAEMON;
    msgpack_packer *pk = salus_client_begin(&c, op, key ? 1 : 0);
    if (key)
        proto_pack_kv_str(pk, key, value);
    return ctl_finish(ctl, &c, op, reply, ctl->timeout_ms);
}

static int call(ctl_t *ctl, const char *op, proto_msg_t *reply)
{
    return call_with(ctl, op, NULL, NULL, reply);
}

/* Calls op and finds the list `key` in its reply (kept in *reply: free it). */
static int call_list(ctl_t *ctl, const char *op, const char *key, proto_msg_t *reply,
                     const msgpack_object **list)
{
    int rc = call(ctl, op, reply);
    if (rc != EXIT_OK)
        return rc;
    *list = proto_get(&reply->body, key);
    if (!*list || (*list)->type != MSGPACK_OBJECT_ARRAY) {
        fprintf(stderr, "salusctl: %s: salusd sent a reply without a %s list\n", op, key);
        proto_msg_free(reply);
        return EXIT_DAEMON;
    }
    return EXIT_OK;
}

static uint64_t get_u(const msgpack_object *map, const char *key)
{
    uint64_t v = 0;
    proto_get_uint(map, key, &v);
    return v;
}

static const char *get_s(const msgpack_object *map, const char *key, char *buf, size_t size)
{
    if (proto_get_str_copy(map, key, buf, size) < 0)
        snprintf(buf, size, "?");
    return buf;
}

static int verb_status(ctl_t *ctl, int argc, char **argv)
{
    proto_msg_t reply;
    char a[128], b[128], dev[64];
    (void)argc;
    (void)argv;
    int rc = call(ctl, "status", &reply);
    if (rc != EXIT_OK)
        return rc;
    if (ctl->json) {
        json_print(stdout, &reply.body);
        putchar('\n');
    } else {
        uint64_t up = get_u(&reply.body, "uptime_ms");
        printf("%s (protocol %llu) on %s\n", get_s(&reply.body, "server", a, sizeof(a)),
               (unsigned long long)get_u(&reply.body, "protocol"),
               get_s(&reply.body, "socket", b, sizeof(b)));
        printf("  pid          %llu\n", (unsigned long long)get_u(&reply.body, "pid"));
        printf("  uptime       %llu.%01llu s\n", (unsigned long long)(up / 1000),
               (unsigned long long)(up % 1000 / 100));
        printf("  device       %s\n", get_s(&reply.body, "device", dev, sizeof(dev)));
        const msgpack_object *gpus = proto_get(&reply.body, "gpus");
        for (uint32_t i = 0; gpus && gpus->type == MSGPACK_OBJECT_ARRAY && i < gpus->via.array.size;
             i++) {
            const msgpack_object *g = &gpus->via.array.ptr[i];
            printf("  gpu %-8llu %s, %.0f MiB, %.0f MiB in chunks\n",
                   (unsigned long long)get_u(g, "index"), get_s(g, "name", a, sizeof(a)),
                   (double)get_u(g, "total_bytes") / 1048576.0,
                   (double)get_u(g, "used_bytes") / 1048576.0);
        }
        printf("  jobs         %llu\n", (unsigned long long)get_u(&reply.body, "jobs"));
        printf("  connections  %llu\n", (unsigned long long)get_u(&reply.body, "connections"));
        const msgpack_object *cl = proto_get(&reply.body, "cluster");
        if (cl && cl->type == MSGPACK_OBJECT_MAP) {
            int member = 0;
            proto_get_bool(cl, "member", &member);
            printf("  cluster      node %s, %s, etcd %s\n", get_s(cl, "node", a, sizeof(a)),
                   member ? "member" : "NOT A MEMBER (lease lost)", get_s(cl, "etcd", b, sizeof(b)));
            printf("  lease        %llx, TTL %llu s, %.1f s left\n",
                   (unsigned long long)get_u(cl, "lease_id"),
                   (unsigned long long)get_u(cl, "lease_ttl_s"),
                   (double)get_u(cl, "lease_left_ms") / 1000.0);
            printf("  leader       %s\n", get_s(cl, "leader", a, sizeof(a)));
            char warning[512];
            if (proto_get_str_copy(cl, "etcd_warning", warning, sizeof(warning)) == 0)
                printf("  WARNING      %s\n", warning);
            const msgpack_object *ms = proto_get(cl, "members");
            for (uint32_t i = 0; ms && ms->type == MSGPACK_OBJECT_ARRAY && i < ms->via.array.size;
                 i++) {
                const msgpack_object *m = &ms->via.array.ptr[i];
                int up = 0;
                proto_get_bool(m, "link_up", &up);
                printf("  member       %-12s %-22s link %s\n", get_s(m, "node", a, sizeof(a)),
                       get_s(m, "addr", b, sizeof(b)), up ? "up" : "down");
            }
        }
    }
    proto_msg_free(&reply);
    return EXIT_OK;
}

static int verb_ps(ctl_t *ctl, int argc, char **argv)
{
    proto_msg_t reply;
    (void)argc;
    (void)argv;
    const msgpack_object *jobs;
    int rc = call_list(ctl, "ps", "jobs", &reply, &jobs);
    if (rc != EXIT_OK)
        return rc;
    if (ctl->json) {
        json_print(stdout, jobs);
        putchar('\n');
    } else {
        /* a CONTAINER column when a job runs in one (its id from its cgroup path) */
        int containers = 0;
        for (uint32_t i = 0; i < jobs->via.array.size; i++) {
            const char *id;
            size_t id_len;
            containers |= proto_get_str(&jobs->via.array.ptr[i], "container", &id, &id_len) == 0;
        }
        /* TARGET_MS, P99_MS, OVER when some job is latency-critical (--latency-target) */
        int classes = 0;
        for (uint32_t i = 0; i < jobs->via.array.size; i++) {
            const msgpack_object *t = proto_get(&jobs->via.array.ptr[i], "latency_target_ms");
            classes |= t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
        }
        /* WAITING_FOR (last: a sentence) when some job waits for admission */
        int reasons = 0;
        for (uint32_t i = 0; i < jobs->via.array.size; i++) {
            const char *why;
            size_t why_len;
            reasons |= proto_get_str(&jobs->via.array.ptr[i], "wait_reason", &why, &why_len) == 0;
        }
        printf("%-5s %-20s %-8s %-6s %-8s %-4s %-5s %7s %9s %9s %9s %-16s %6s%s%s%s\n", "ID",
               "NAME", "PID", "UID", "STATE", "GPU", "LANE", "ITER", "MEM_MIB", "GPU_S", "WAIT_S",
               "GROUP:RANK", "GANG_S", containers ? " CONTAINER" : "",
               classes ? " TARGET_MS  P99_MS   OVER" : "", reasons ? "  WAITING_FOR" : "");
        for (uint32_t i = 0; i < jobs->via.array.size; i++) {
            const msgpack_object *j = &jobs->via.array.ptr[i];
            char name[64], state[16], gpu[32] = "-", lane[12] = "-";
            const msgpack_object *g = proto_get(j, "gpu"), *l = proto_get(j, "lane");
            if (g && g->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                snprintf(gpu, sizeof(gpu), "%llu", (unsigned long long)g->via.u64);
            const msgpack_object *gs = proto_get(j, "gpus"); /* --gpus N: every one, "0,1" */
            for (uint32_t k = 0; gs && gs->type == MSGPACK_OBJECT_ARRAY && gs->via.array.size > 1 &&
                                 k < gs->via.array.size; k++)
                snprintf(gpu + (k ? strlen(gpu) : 0), sizeof(gpu) - (k ? strlen(gpu) : 0),
                         "%s%llu", k ? "," : "", (unsigned long long)gs->via.array.ptr[k].via.u64);
            if (l && l->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                snprintf(lane, sizeof(lane), "%llu", (unsigned long long)l->via.u64);
            char group[96] = "-";
            const char *gname;
            size_t glen;
            if (proto_get_str(j, "group", &gname, &glen) == 0)
                snprintf(group, sizeof(group), "%.*s:%llu", (int)glen, gname,
                         (unsigned long long)get_u(j, "rank"));
            char container[16] = "-";
            if (containers && proto_get_str_copy(j, "container", container, sizeof(container)) < 0)
                snprintf(container, sizeof(container), "-");
            printf("%-5llu %-20.20s %-8llu %-6llu %-8s %-4s %-5s %7llu %9.1f %9.1f %9.1f %-16.16s "
                   "%6.1f%s%s",
                   (unsigned long long)get_u(j, "id"), get_s(j, "name", name, sizeof(name)),
                   (unsigned long long)get_u(j, "pid"), (unsigned long long)get_u(j, "uid"),
                   get_s(j, "state", state, sizeof(state)), gpu, lane,
                   (unsigned long long)get_u(j, "iterations"),
                   (double)get_u(j, "memory_bytes") / 1048576.0,
                   (double)get_u(j, "gpu_time_ms") / 1000.0,
                   (double)get_u(j, "wait_time_ms") / 1000.0, group,
                   (double)get_u(j, "gang_wait_ms") / 1000.0, containers ? " " : "",
                   containers ? container : "");
            const msgpack_object *t = proto_get(j, "latency_target_ms");
            if (classes && t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                printf(" %9llu %7.1f %6llu", (unsigned long long)t->via.u64,
                       (double)get_u(j, "request_p99_us") / 1000.0,
                       (unsigned long long)get_u(j, "requests_over_target"));
            else if (classes)
                printf(" %9s %7s %6s", "-", "-", "-");
            const char *why;
            size_t why_len;
            if (reasons && proto_get_str(j, "wait_reason", &why, &why_len) == 0)
                printf("  %.*s", (int)why_len, why);
            else if (reasons)
                printf("  -");
            putchar('\n');
        }
    }
    proto_msg_free(&reply);
    return EXIT_OK;
}

static int verb_version(ctl_t *ctl, int argc, char **argv)
{
    salus_client_t c;
    char err[256] = "";
    (void)argc;
    (void)argv;
    if (!ctl->json)
        printf("salusctl %s (protocol %d)\n", SALUS_VERSION, PROTO_VERSION);
    if (salus_client_open(&c, ctl->socket_path, "salusctl", ctl->timeout_ms, err, sizeof(err)) < 0) {
        if (ctl->json) /* what the client knows, then the error on stderr */
            printf("{\"client\": \"salusctl %s\", \"protocol\": %d, \"server\": null}\n",
                   SALUS_VERSION, PROTO_VERSION);
        fprintf(stderr, "salusctl: cannot reach salusd at %s: %s\n", ctl->socket_path, err);
        return EXIT_DAEMON;
    }
    if (ctl->json) {
        printf("{\"client\": \"salusctl %s\", \"protocol\": %d, \"server\": ", SALUS_VERSION,
               PROTO_VERSION);
        json_print_string(stdout, c.server, strlen(c.server));
        printf("}\n");
    } else {
        printf("%s\n", c.server);
    }
    salus_client_close(&c);
    return EXIT_OK;
}

static int verb_run(ctl_t *ctl, int argc, char **argv)
{
    return salusctl_run(ctl->socket_path, ctl->timeout_ms, argc, argv);
}

/* The policy names salusd accepts: its own list (policy without a name). 1 when name is one
 * of them, 0 when not (the list in names), negative when salusd did not answer (said). */
static int policy_known(ctl_t *ctl, const char *name, char *names, size_t size)
{
    proto_msg_t reply;
    size_t used = 0;
    if (call(ctl, "policy", &reply) != EXIT_OK)
        return -1;
    const msgpack_object *all = proto_get(&reply.body, "policies");
    int known = 0;
    names[0] = '\0';
    for (uint32_t i = 0; all && all->type == MSGPACK_OBJECT_ARRAY && i < all->via.array.size; i++) {
        const msgpack_object *o = &all->via.array.ptr[i];
        if (o->type != MSGPACK_OBJECT_STR)
            continue;
        if (strlen(name) == o->via.str.size && strncasecmp(name, o->via.str.ptr, o->via.str.size) == 0)
            known = 1;
        if (used < size) {
            int w = snprintf(names + used, size - used, "%s%.*s", used ? ", " : "",
                             (int)o->via.str.size, o->via.str.ptr);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    proto_msg_free(&reply);
    return known;
}

static int verb_policy(ctl_t *ctl, int argc, char **argv)
{
    proto_msg_t reply;
    char names[512];
    if (argc && !policy_find(argv[0])) { /* not one this salusctl knows: ask salusd's list */
        int known = policy_known(ctl, argv[0], names, sizeof(names));
        if (known < 0)
            return EXIT_DAEMON;
        if (!known) {
            fprintf(stderr, "salusctl: policy: no policy '%s' (salusd has: %s)\n", argv[0],
                    names);
            return EXIT_USAGE;
        }
    }
    int rc = call_with(ctl, "policy", argc ? "name" : NULL, argc ? argv[0] : NULL, &reply);
    if (rc != EXIT_OK)
        return rc;
    if (ctl->json) {
        json_print(stdout, &reply.body);
        putchar('\n');
    } else {
        char name[32];
        printf("policy %s", get_s(&reply.body, "policy", name, sizeof(name)));
        const msgpack_object *all = proto_get(&reply.body, "policies");
        if (all && all->type == MSGPACK_OBJECT_ARRAY) {
            printf(" (available:");
            for (uint32_t i = 0; i < all->via.array.size; i++)
                if (all->via.array.ptr[i].type == MSGPACK_OBJECT_STR)
                    printf(" %.*s", (int)all->via.array.ptr[i].via.str.size,
                           all->via.array.ptr[i].via.str.ptr);
            printf(")");
        }
        putchar('\n');
    }
    proto_msg_free(&reply);
    return EXIT_OK;
}

static int verb_lanes(ctl_t *ctl, int argc, char **argv)
{
    proto_msg_t reply;
    (void)argc;
    (void)argv;
    const msgpack_object *lanes;
    int rc = call_list(ctl, "lanes", "lanes", &reply, &lanes);
    if (rc != EXIT_OK)
        return rc;
    if (ctl->json) {
        json_print(stdout, lanes);
        putchar('\n');
    } else {
        printf("%-4s %-5s %10s %-7s %s\n", "GPU", "LANE", "SIZE_MIB", "ACTIVE", "JOBS");
        for (uint32_t i = 0; i < lanes->via.array.size; i++) {
            const msgpack_object *l = &lanes->via.array.ptr[i];
            const msgpack_object *active = proto_get(l, "active"), *jobs = proto_get(l, "jobs");
            char act[24] = "-";
            if (active && active->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                snprintf(act, sizeof(act), "%llu", (unsigned long long)active->via.u64);
            printf("%-4llu %-5llu %10.1f %-7s", (unsigned long long)get_u(l, "gpu"),
                   (unsigned long long)get_u(l, "lane"),
                   (double)get_u(l, "size_bytes") / 1048576.0, act);
            for (uint32_t k = 0; jobs && jobs->type == MSGPACK_OBJECT_ARRAY && k < jobs->via.array.size; k++)
                printf("%s%llu", k ? "," : " ", (unsigned long long)jobs->via.array.ptr[k].via.u64);
            putchar('\n');
        }
    }
    proto_msg_free(&reply);
    return EXIT_OK;
}

/* In the order of salusctl(1)'s list: the daemon, jobs, groups, then the client itself. */
static const verb_t verbs[] = {
    {"status", 0, 0, verb_status, "status [--json]",
     "show the daemon's state: its device and GPUs, jobs, connections (and the cluster)"},
    {"ps", 0, 0, verb_ps, "ps [--json]", "list jobs"},
    {"lanes", 0, 0, verb_lanes, "lanes [--json]", "list the memory lanes of each GPU"},
    {"policy", 0, 1, verb_policy, "policy [NAME] [--json]",
     "show the scheduling policy, or switch to NAME"},
    {"run", 1, -1, verb_run, "run [--name N] [--iterations N] [--persistent B] [--ephemeral B] "
     "[--priority N] [--gpus N] [--latency-target MS] [--request-ms MS] [--group G --world N --rank R [--local-rank L] "
     "[--sync bsp|ssp:S|asp] [--share-gpus] [--restore]] -- CMD [ARGS]",
     "run a command as a salus job, in the foreground (a rank of group G: from the flags, or "
     "from mpirun's, srun's or torchrun's variables); B: 512MiB, 2GiB (powers of 1024) or "
     "512MB (10^6)"},
    {"submit", 1, -1, verb_submit, "submit [--log FILE] [--name N] [--iterations N] "
     "[--persistent B] [--ephemeral B] [--priority N] [--gpus N] [--latency-target MS] "
     "[--request-ms MS] [--group G --world N --rank R "
     "[--local-rank L] [--sync bsp|ssp:S|asp] [--share-gpus] [--restore]] -- CMD [ARGS]",
     "run a command as a detached job (output to a log file); prints its id"},
    {"kill", 1, -1, verb_kill, "kill [--force] [--grace S] JOB",
     "end a job: SIGTERM, then SIGKILL after S seconds (10); --force: SIGKILL at once"},
    {"wait", 1, -1, verb_wait, "wait [--json] JOB",
     "wait until a job ends; exit with its exit status when known (submit), else 0 done, "
     "1 failed"},
    {"logs", 1, -1, verb_logs, "logs [-f] JOB", "print a submitted job's log (-f: follow)"},
    {"groups", 0, 0, verb_groups, "groups [--json]",
     "list groups (distributed jobs): state, failed rank, each rank's job, pid and GPU, "
     "and the parameter-server tables here"},
    {"checkpoint", 1, -1, verb_checkpoint,
     "checkpoint GROUP [--period S] [--timeout S] [--uid UID]",
     "write the group's parameter-server tables at one clock to files under the state "
     "directory (restored by run --restore); --period S: one every S seconds (0 stops)"},
    {"ps-servers", 3, -1, verb_ps_servers, "ps-servers GROUP --add NODE | --remove NODE [--json]",
     "change the parameter servers of every table of your group GROUP (cluster): NODE (a live "
     "member) joins, or leaves; prints each table's old and new view"},
    {"stats", 0, 0, verb_stats, "stats [--json]",
     "per GPU memory, utilisation, lanes and jobs; per job iteration rate"},
    {"top", 0, 0, verb_top, "top", "live view of GPUs and jobs, refreshed each second (q quits)"},
    {"cdi", 1, -1, verb_cdi, "cdi generate [--output FILE] [--kind VENDOR/CLASS]",
     "write a Container Device Interface spec for this node (default kind salus.dev/gpu; "
     "one device per GPU and all): a container given one runs its CUDA programs as salus "
     "jobs, on that GPU (podman run --device salus.dev/gpu=0; see docs/containers.md)"},
    {"version", 0, 0, verb_version, "version [--json]",
     "show the client's and the daemon's versions"},
    {"help", 0, 1, verb_help, "help [VERB]", "show help for all verbs or one"},
};
#define VERB_COUNT (sizeof(verbs) / sizeof(verbs[0]))

/* A verb's help; the policy verb's names come from the policies' registry. */
static void print_help(FILE *out, const verb_t *v)
{
    fputs(v->help, out);
    if (strcmp(v->name, "policy") == 0) {
        fputs(" (", out);
        for (size_t i = 0; i < policy_count(); i++)
            fprintf(out, "%s%s", i ? ", " : "", policy_at(i)->name);
        fputs(")", out);
    }
}

static void usage(FILE *out)
{
    fprintf(out, "usage: salusctl [--socket PATH] [--json] VERB [ARGS]\n\nVerbs:\n");
    for (size_t i = 0; i < VERB_COUNT; i++) {
        fprintf(out, "  %-18s ", verbs[i].name);
        print_help(out, &verbs[i]);
        fputc('\n', out);
    }
    fprintf(out, "\nOptions:\n  --socket PATH      salusd's control socket (default: $SALUS_SOCKET "
                 "or the per-user default)\n  --json             machine-readable output\n"
                 "  --timeout-ms N     give up on the daemon after N ms (default 5000)\n");
}

static const verb_t *find_verb(const char *name)
{
    for (size_t i = 0; i < VERB_COUNT; i++)
        if (strcmp(verbs[i].name, name) == 0)
            return &verbs[i];
    return NULL;
}

static int verb_help(ctl_t *ctl, int argc, char **argv)
{
    (void)ctl;
    if (argc == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    const verb_t *v = find_verb(argv[0]);
    if (!v) {
        fprintf(stderr, "salusctl: no verb '%s' (see salusctl help)\n", argv[0]);
        return EXIT_USAGE;
    }
    printf("usage: salusctl %s\n  ", v->usage);
    print_help(stdout, v);
    putchar('\n');
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    ctl_t ctl = {.timeout_ms = 5000};
    const char *verb_name = NULL;
    char *args[65]; /* NULL-terminated: run hands it to execvp */
    int nargs = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            ctl.json = 1;
        } else if (strcmp(a, "--socket") == 0 || strcmp(a, "--timeout-ms") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "salusctl: %s needs a value\n", a);
                return EXIT_USAGE;
            }
            if (a[2] == 's') {
                if (snprintf(ctl.socket_path, sizeof(ctl.socket_path), "%s", argv[++i]) >=
                    (int)sizeof(ctl.socket_path)) {
                    fprintf(stderr, "salusctl: socket path too long\n");
                    return EXIT_USAGE;
                }
            } else {
                char *end;
                long v = strtol(argv[++i], &end, 10);
                if (*end || v <= 0 || v > 3600000) {
                    fprintf(stderr, "salusctl: --timeout-ms expects 1..3600000\n");
                    return EXIT_USAGE;
                }
                ctl.timeout_ms = (int)v;
            }
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return EXIT_OK;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "salusctl: unknown option '%s' (see salusctl help)\n", a);
            return EXIT_USAGE;
        } else if (!verb_name) {
            verb_name = a;
            const verb_t *v = find_verb(a);
            if (v && v->max_args < 0) { /* the rest is the verb's, untouched */
                for (i++; i < argc && nargs < (int)(sizeof(args) / sizeof(args[0])) - 1; i++)
                    args[nargs++] = argv[i];
                if (i < argc) {
                    fprintf(stderr, "salusctl: too many arguments\n");
                    return EXIT_USAGE;
                }
                break;
            }
        } else if (nargs < (int)(sizeof(args) / sizeof(args[0])) - 1) {
            args[nargs++] = argv[i];
        } else {
            fprintf(stderr, "salusctl: too many arguments\n");
            return EXIT_USAGE;
        }
    }
    if (!verb_name) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const verb_t *verb = find_verb(verb_name);
    if (!verb) {
        fprintf(stderr, "salusctl: unknown verb '%s' (see salusctl help)\n", verb_name);
        return EXIT_USAGE;
    }
    if (nargs < verb->min_args || (verb->max_args >= 0 && nargs > verb->max_args)) {
        fprintf(stderr, "salusctl: usage: salusctl %s\n", verb->usage);
        return EXIT_USAGE;
    }
    if (!ctl.socket_path[0] && salus_default_socket_path(ctl.socket_path,
                                                         sizeof(ctl.socket_path)) < 0) {
        fprintf(stderr, "salusctl: the socket path is too long\n");
        return EXIT_USAGE;
    }
    args[nargs] = NULL;
    return verb->run(&ctl, nargs, args);
}
