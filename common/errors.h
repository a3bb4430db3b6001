/* Error conventions: functions return 0 on success or a negative error code,
 * with one cleanup label. CHECK/CHECK_GOTO log the failing call site. */
#ifndef SALUS_COMMON_ERRORS_H
#define SALUS_COMMON_ERRORS_H

#include "log.h"

#define SALUS_CHECK(call)                                                      \
    do {                                                                       \
        int check_rc_ = (call);                                                \
        if (check_rc_ < 0) {                                                   \
            LOG_DEBUG("%s failed: %d", #call, check_rc_);                      \
            return check_rc_;                                                  \
        }                                                                      \
    } while (0)

#define SALUS_CHECK_GOTO(call, rc, label)                                      \
    do {                                                                       \
        (rc) = (call);                                                         \
        if ((rc) < 0) {                                                        \
            LOG_DEBUG("%s failed: %d", #call, (rc));                           \
            goto label;                                                        \
        }                                                                      \
    } while (0)

#endif
