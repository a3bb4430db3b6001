/* The jobs subsystem's rows of the request table (daemon.h: server_op_t; ctl's handlers.c
 * takes them). */
#include "groups.h"
#include "jobs.h"

const server_op_t jobs_ops[] = {
    {"register", jobs_handle_register},
    {"mem_grow", jobs_handle_mem_grow},
    {"mem_release", jobs_handle_mem_release},
    {"mem_charge", jobs_handle_mem_charge},
    {"gate_page", jobs_handle_gate_page},
    {"lane_map", jobs_handle_lane_map},
    {"lane_unmap", jobs_handle_lane_unmap},
    {"reattach", jobs_handle_reattach},
    {"reattach_chunk", jobs_handle_reattach_chunk},
    {"reattach_done", jobs_handle_reattach_done},
    {"groups", groups_handle_list},
    {NULL, NULL},
};
