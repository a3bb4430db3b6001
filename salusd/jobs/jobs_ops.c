/* The jobs subsystem's rows of the request table (daemon.h: server_op_t; ctl's handlers.c
 * takes them). */
#include "groups.h"
#include "jobs.h"

const server_op_t jobs_ops[] = {
    {"register", jobs_handle_register, SERVER_OP_CAP_JOBS},
    {"mem_grow", jobs_handle_mem_grow, SERVER_OP_JOB},
    {"mem_release", jobs_handle_mem_release, SERVER_OP_JOB},
    {"mem_charge", jobs_handle_mem_charge, SERVER_OP_JOB},
    {"gate_page", jobs_handle_gate_page, SERVER_OP_JOB},
    {"lane_map", jobs_handle_lane_map, SERVER_OP_JOB},
    {"lane_unmap", jobs_handle_lane_unmap, SERVER_OP_JOB},
    {"reattach", jobs_handle_reattach, SERVER_OP_CAP_JOBS},
    {"reattach_chunk", jobs_handle_reattach_chunk, SERVER_OP_JOB},
    {"reattach_done", jobs_handle_reattach_done, SERVER_OP_JOB},
    {"reattach_lane", jobs_handle_reattach_lane, SERVER_OP_JOB},
    {"groups", groups_handle_list, SERVER_OP_ANYONE},
    {NULL, NULL, 0},
};
