/* The parameter servers' data plane (ps_net.h): the UCP context and worker, the worker's event
 * fd driven by the daemon's libevent loop, the dispatch event that runs the caller's callbacks,
 * and destroy. Peers and sends are in ps_net_peers.c, receiving in ps_net_recv.c. */
#include "log.h"
#include "ps_net-internal.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long destroy lets UCX finish closing endpoints and cancelling requests. */
#define PS_NET_DESTROY_MS 2000
/* The longest one turn of the loop spends progressing UCX. */
#define PS_NET_PROGRESS_US 5000

int ps_net_status_errno(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return 0;
    case UCS_ERR_CANCELED:
        return -ECANCELED;
    case UCS_ERR_NO_MEMORY:
        return -ENOMEM;
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_EXCEEDS_LIMIT:
        return -EMSGSIZE;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
        return -ETIMEDOUT;
    case UCS_ERR_UNREACHABLE:
        return -EHOSTUNREACH;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
        return -EINVAL;
    default:
        /* connection reset, I/O error, rejected, not connected: the peer is gone to us */
        return -ECONNRESET;
    }
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Progress until the worker can sleep: ucp_worker_arm says UCS_ERR_BUSY while events are
 * pending (progress again), UCS_OK once the fd will signal the next one. A large transfer
 * keeps the worker busy for seconds: after PS_NET_PROGRESS_US the loop gets its turn (the
 * daemon's other sockets, the etcd lease) and progress resumes from a zero timer (a timer,
 * not event_active: libevent would run an activated event again before polling). */
static void progress(ps_net_t *net)
{
    int64_t until = now_us() + PS_NET_PROGRESS_US;
    for (;;) {
        while (ucp_worker_progress(net->worker) != 0) {
            if (now_us() >= until)
                goto yield;
        }
        ucs_status_t status = ucp_worker_arm(net->worker);
        if (status == UCS_OK)
            return;
        if (status != UCS_ERR_BUSY) {
            LOG_ERROR("UCX: ucp_worker_arm: %s", ucs_status_string(status));
            return;
        }
        if (now_us() >= until)
            goto yield;
    }
yield:;
    static const struct timeval zero = {0, 0};
    evtimer_add(net->resume, &zero);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    progress(arg);
}

void ps_net_kick(ps_net_t *net)
{
    event_active(net->wake, EV_READ, 0);
}

void ps_net_schedule(ps_net_t *net)
{
    if (!net->destroying)
        event_active(net->dispatch, EV_TIMEOUT, 0);
}

/* The completed sends' callbacks, then the messages that are ready, in order per peer. */
static void deliver_done(ps_net_t *net)
{
    ps_net_send_t *s;
    while ((s = net->done) != NULL) {
        net->done = s->next;
        if (!net->done)
            net->done_tail = NULL;
        ps_net_sent_fn sent = s->sent;
        void *ctx = s->ctx;
        int status = s->status;
        free(s);
        sent(ctx, status);
    }
}

static void on_dispatch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ps_net_t *net = arg;
    ps_net_close_failed(net);
    deliver_done(net);
    ps_net_deliver(net);
    /* a callback may have sent or removed something that completed at once */
    if (net->done)
        ps_net_schedule(net);
}

static int fail(char *err, size_t err_size, int rc, const char *what, ucs_status_t status)
{
    snprintf(err, err_size, "UCX: %s: %s", what, ucs_status_string(status));
    return rc;
}

int ps_net_create(struct event_base *base, const char *self, ps_net_recv_fn recv, void *ctx,
                  ps_net_t **out, char *err, size_t err_size)
{
    *out = NULL;
    if (!base || !self || !recv || !*self || strlen(self) >= PS_NET_NODE_BYTES) {
        snprintf(err, err_size, "ps_net: a node name of 1 to %d bytes and a callback needed",
                 PS_NET_NODE_BYTES - 1);
        return -EINVAL;
    }
    ps_net_t *net = calloc(1, sizeof(*net));
    if (!net) {
        snprintf(err, err_size, "ps_net: out of memory");
        return -ENOMEM;
    }
    int rc = -EIO;
    net->base = base;
    snprintf(net->self, sizeof(net->self), "%s", self);
    net->recv = recv;
    net->ctx = ctx;

    ucp_config_t *config = NULL;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config); /* UCX_TLS etc. from the env */
    if (status != UCS_OK) {
        rc = fail(err, err_size, -EIO, "ucp_config_read", status);
        goto fail;
    }
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 0,
    };
    status = ucp_init(&params, config, &net->context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        rc = fail(err, err_size, -EIO, "ucp_init", status);
        goto fail;
    }
    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
        .events = UCP_WAKEUP_RX | UCP_WAKEUP_TX,
    };
    status = ucp_worker_create(net->context, &wparams, &net->worker);
    if (status != UCS_OK) {
        rc = fail(err, err_size, -EIO, "ucp_worker_create", status);
        goto fail;
    }
    status = ucp_worker_get_address(net->worker, &net->address, &net->address_len);
    if (status != UCS_OK) {
        rc = fail(err, err_size, -EIO, "ucp_worker_get_address", status);
        goto fail;
    }
    ucp_am_handler_param_t am = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = PS_NET_AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = ps_net_on_am,
        .arg = net,
    };
    status = ucp_worker_set_am_recv_handler(net->worker, &am);
    if (status != UCS_OK) {
        rc = fail(err, err_size, -EIO, "ucp_worker_set_am_recv_handler", status);
        goto fail;
    }
    int efd = -1;
    status = ucp_worker_get_efd(net->worker, &efd);
    if (status != UCS_OK) {
        rc = fail(err, err_size, -EIO, "ucp_worker_get_efd", status);
        goto fail;
    }
    net->wake = event_new(base, efd, EV_READ | EV_PERSIST, on_wake, net);
    net->dispatch = event_new(base, -1, 0, on_dispatch, net);
    net->resume = evtimer_new(base, on_wake, net);
    if (!net->wake || !net->dispatch || !net->resume || event_add(net->wake, NULL) != 0) {
        snprintf(err, err_size, "ps_net: cannot watch UCX's event fd");
        rc = -ENOMEM;
        goto fail;
    }
    progress(net); /* arms the worker */
    *out = net;
    return 0;
fail:
    ps_net_destroy(net);
    return rc;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ps_net_destroy(ps_net_t *net)
{
    if (!net)
        return;
    net->destroying = 1;
    /* the peers' endpoints closed by force and their arriving messages cancelled */
    for (int i = 0; i < PS_NET_MAX_PEERS; i++) {
        if (net->peers[i]) {
            ps_net_peer_t *peer = net->peers[i];
            net->peers[i] = NULL;
            ps_net_peer_drop(net, peer, -ECANCELED);
        }
    }
    if (net->worker) {
        /* let UCX finish the closes and call back every request it still holds */
        int64_t deadline = now_ms() + PS_NET_DESTROY_MS;
        while ((net->closing || net->sends || net->receiving) && now_ms() < deadline)
            ucp_worker_progress(net->worker);
        if (net->sends || net->closing || net->receiving)
            LOG_WARN("ps_net: UCX did not finish %s%s%s in %d ms; released with the worker",
                     net->sends ? "sends " : "", net->closing ? "closes " : "",
                     net->receiving ? "receives" : "", PS_NET_DESTROY_MS);
    }
    /* sends UCX never called back: they end here, their requests go with the worker */
    while (net->sends) {
        ps_net_send_t *s = net->sends;
        s->request = NULL;
        ps_net_send_finish(net, s, -ECANCELED);
    }
    deliver_done(net);
    if (net->wake)
        event_free(net->wake);
    if (net->dispatch)
        event_free(net->dispatch);
    if (net->resume)
        event_free(net->resume);
    if (net->address)
        ucp_worker_release_address(net->worker, net->address);
    if (net->worker)
        ucp_worker_destroy(net->worker);
    net->worker = NULL;
    /* receives UCX never finished: their buffers are free only now that the worker is gone */
    while (net->receiving) {
        ps_net_recv_t *r = net->receiving;
        r->request = NULL;
        ps_net_recv_free(net, r);
    }
    if (net->context)
        ucp_cleanup(net->context);
    memset(net->master, 0, sizeof(net->master));
    free(net);
}

int ps_net_address(const ps_net_t *net, const void **addr, size_t *len)
{
    if (!net || !net->address)
        return -EINVAL;
    *addr = net->address;
    *len = net->address_len;
    return 0;
}

void ps_net_get_stats(const ps_net_t *net, ps_net_stats_t *stats)
{
    *stats = net->stats;
}
