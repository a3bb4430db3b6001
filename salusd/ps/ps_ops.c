/* The parameter servers' rows of the request table (daemon.h: server_op_t; ctl's handlers.c
 * takes them). */
#include "ps.h"
#include "ps_ckpt.h"
#include "ps_cluster.h"
#include "ps_local.h"

const server_op_t ps_ops[] = {
    {"ps_open", ps_local_handle_open},
    {"ps_push", ps_local_handle_push},
    {"ps_pull", ps_local_handle_pull},
    {"ps_clock", ps_local_handle_clock},
    {"ps_close", ps_local_handle_close},
    {"ps_checkpoint", ps_ckpt_handle_checkpoint},
    {"ps_fed_state", ps_local_handle_fed_state},
    {"ps_fed_push", ps_local_handle_fed_push},
    {"ps_servers", ps_replicas_handle_servers},
    {NULL, NULL},
};
