/* Blocking client side of the control protocol (salusctl, tests; the shim later).
 * Every call has a timeout so that a stuck daemon never hangs a client. */
#ifndef SALUS_COMMON_CLIENT_H
#define SALUS_COMMON_CLIENT_H

#include "proto.h"

typedef struct salus_client_s {
    int fd;
    uint64_t next_id;
    int timeout_ms;
    size_t max_frame_bytes;
    char server[64];          /* from the hello reply, e.g. "salusd 0.1.0" */
    proto_enc_t enc;
} salus_client_t;

/* Connects to path and exchanges hellos. Returns 0, or a negative errno (-ECONNREFUSED,
 * -ENOENT, ...) / -EPROTO when the server refused the hello (message in err). */
int salus_client_open(salus_client_t *c, const char *path, const char *client_name,
                      int timeout_ms, char *err, size_t err_size);
void salus_client_close(salus_client_t *c);

/* Sends a whole frame (length prefix included). */
int salus_send_frame(int fd, const void *frame, size_t bytes, int timeout_ms);
/* The same, passing nfds (1..8) file descriptors with the frame's first bytes
 * (SCM_RIGHTS); they stay the caller's to close. */
int salus_send_frame_fds(int fd, const void *frame, size_t bytes, const int *fds, int nfds,
                         int timeout_ms);
/* Receives one frame and decodes it into msg (free with proto_msg_free). A negative
 * timeout_ms waits for ever. */
int salus_recv_msg(int fd, proto_msg_t *msg, size_t max_frame_bytes, int timeout_ms);
/* The same, also collecting up to max_fds file descriptors passed with the frame
 * (SCM_RIGHTS, close-on-exec); extra ones are closed. *nfds gets the count. */
int salus_recv_msg_fds(int fd, proto_msg_t *msg, size_t max_frame_bytes, int timeout_ms,
                       int *fds, int max_fds, int *nfds);

/* Starts a request: returns the packer to write body_fields key/value pairs into;
 * then call salus_client_call(). */
msgpack_packer *salus_client_begin(salus_client_t *c, const char *op, uint32_t body_fields);
/* Sends the request begun above and waits for its reply. Returns 0 with a PROTO_REPLY in
 * reply, -EREMOTEIO with the error reply's message copied to err, or a negative errno. */
int salus_client_call(salus_client_t *c, proto_msg_t *reply, char *err, size_t err_size);
/* salus_client_call, passing nfds descriptors with the request (see salus_send_frame_fds). */
int salus_client_call_passing(salus_client_t *c, const int *fds, int nfds, proto_msg_t *reply,
                              char *err, size_t err_size);
/* The same with its own reply timeout (negative: for ever) and passed descriptors.
 * -ENOMEM when the daemon answered PROTO_ENOMEM. */
int salus_client_call_fds(salus_client_t *c, proto_msg_t *reply, char *err, size_t err_size,
                          int timeout_ms, int *fds, int max_fds, int *nfds);

#endif
