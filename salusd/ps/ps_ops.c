/* The parameter servers' rows of the request table (daemon.h: server_op_t; ctl's handlers.c
 * takes them). */
#include "ps.h"
#include "ps_ckpt.h"
#include "ps_cluster.h"
#include "ps_local.h"

const server_op_t ps_ops[] = {
    {"ps_open", ps_local_handle_open, SERVER_OP_ANYONE},
    {"ps_push", ps_local_handle_push, SERVER_OP_ANYONE},
    {"ps_pull", ps_local_handle_pull, SERVER_OP_ANYONE},
    {"ps_clock", ps_local_handle_clock, SERVER_OP_ANYONE},
    {"ps_close", ps_local_handle_close, SERVER_OP_ANYONE},
    {"ps_checkpoint", ps_ckpt_handle_checkpoint, SERVER_OP_ANYONE},
    {"ps_fed_state", ps_local_handle_fed_state, SERVER_OP_ANYONE},
    {"ps_fed_push", ps_local_handle_fed_push, SERVER_OP_ANYONE},
    {"ps_servers", ps_replicas_handle_servers, SERVER_OP_ANYONE},
    {NULL, NULL, 0},
};
