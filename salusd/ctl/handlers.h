/* Subsystem ctl/ (libsalusd-ctl), the highest: the request table (its own rows and those jobs/
 * and ps/ export), salusctl's verbs (jobctl.c), the renderers of ps, lanes and stats
 * (render.c). May call every subsystem; nothing below calls it (it hears the jobs through
 * jobctl_jobs_observer).
 *
 * The request handlers (handlers.c): one row per op, each writing exactly one reply or error.
 * main passes handlers_ops to server_start. */
#ifndef SALUS_SALUSD_HANDLERS_H
#define SALUS_SALUSD_HANDLERS_H

#include "daemon.h"

extern const server_ops_t handlers_ops;

#endif
