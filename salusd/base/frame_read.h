/* Reading the wire's frames (proto.h: a 4-byte big-endian length, then that many bytes) from
 * the front of an evbuffer: the one reader behind the control socket (server.c) and the
 * daemon links (cluster/links_conn.c). The bytes come from a peer and are untrusted: a length
 * out of bounds is refused from the header alone, before anything of the frame is held. */
#ifndef SALUS_SALUSD_FRAME_READ_H
#define SALUS_SALUSD_FRAME_READ_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

/* A whole frame at the front of the buffer. */
typedef struct frame_read_s {
    const uint8_t *frame;   /* the header then the payload, contiguous; valid until the
                             * buffer changes */
    const uint8_t *payload; /* frame + PROTO_HEADER_BYTES */
    uint32_t payload_bytes; /* the header's length */
    size_t frame_bytes;     /* PROTO_HEADER_BYTES + payload_bytes: what frame_read_drain takes */
} frame_read_t;

#define FRAME_READ_MORE 0  /* a part of a frame (or nothing): read on */
#define FRAME_READ_READY 1 /* a whole frame: *f is set */

/* The frame at the front of in, nothing drained. FRAME_READ_READY (*f set), FRAME_READ_MORE
 * (the header or the payload is not whole yet), -EMSGSIZE when the header's length is zero,
 * under min_payload_bytes or over max_payload_bytes (the peer's fault: close the connection),
 * or -ENOMEM when the frame could not be made contiguous; why (why_size bytes) says which
 * ("frame length 70000 is over the size cap (65536 bytes)"). */
int frame_read_next(struct evbuffer *in, uint32_t min_payload_bytes, uint32_t max_payload_bytes,
                    frame_read_t *f, char *why, size_t why_size);
/* Drops the frame f (from frame_read_next) from the front of in. */
void frame_read_drain(struct evbuffer *in, const frame_read_t *f);

#endif
