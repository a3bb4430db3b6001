#include "notify.h"

#include "log.h"

#ifdef SALUS_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

void notify_ready(const char *status)
{
    int rc = sd_notifyf(0, "READY=1\nSTATUS=%s", status);
    if (rc > 0)
        LOG_DEBUG("told the service manager READY");
}

void notify_stopping(void)
{
    sd_notify(0, "STOPPING=1");
}
#else
void notify_ready(const char *status)
{
    (void)status;
}

void notify_stopping(void)
{
}
#endif
