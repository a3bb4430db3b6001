/* Service-manager notifications (sd_notify); no-ops when built without libsystemd. */
#ifndef SALUS_SALUSD_NOTIFY_H
#define SALUS_SALUSD_NOTIFY_H

void notify_ready(const char *status);
void notify_stopping(void);

#endif
