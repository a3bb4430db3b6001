/* The request handlers (handlers.c): one row per op, each writing exactly one reply or error.
 * main passes handlers_ops to server_start. */
#ifndef SALUS_SALUSD_HANDLERS_H
#define SALUS_SALUSD_HANDLERS_H

#include "daemon.h"

extern const server_ops_t handlers_ops;

#endif
