/* Reading the wire's frames from an evbuffer (see frame_read.h). */
#include "frame_read.h"

#include "proto.h"

#include <errno.h>
#include <event2/buffer.h>
#include <stdio.h>

int frame_read_next(struct evbuffer *in, uint32_t min_payload_bytes, uint32_t max_payload_bytes,
                    frame_read_t *f, char *why, size_t why_size)
{
    uint8_t header[PROTO_HEADER_BYTES];
    size_t available = evbuffer_get_length(in);
    if (available < PROTO_HEADER_BYTES)
        return FRAME_READ_MORE;
    evbuffer_copyout(in, header, sizeof(header));
    uint32_t len = ((uint32_t)header[0] << 24) | ((uint32_t)header[1] << 16) |
                   ((uint32_t)header[2] << 8) | (uint32_t)header[3];
    if (len == 0) {
        snprintf(why, why_size, "frame length is zero");
        return -EMSGSIZE;
    }
    if (len > max_payload_bytes) {
        snprintf(why, why_size, "frame length %u is over the size cap (%u bytes)", len,
                 max_payload_bytes);
        return -EMSGSIZE;
    }
    if (len < min_payload_bytes) {
        snprintf(why, why_size, "frame length %u is under the least a frame holds here "
                 "(%u bytes)", len, min_payload_bytes);
        return -EMSGSIZE;
    }
    size_t frame_bytes = PROTO_HEADER_BYTES + (size_t)len;
    if (available < frame_bytes)
        return FRAME_READ_MORE;
    const uint8_t *frame = evbuffer_pullup(in, (ev_ssize_t)frame_bytes);
    if (!frame) {
        snprintf(why, why_size, "out of memory");
        return -ENOMEM;
    }
    *f = (frame_read_t){.frame = frame, .payload = frame + PROTO_HEADER_BYTES,
                        .payload_bytes = len, .frame_bytes = frame_bytes};
    return FRAME_READ_READY;
}

void frame_read_drain(struct evbuffer *in, const frame_read_t *f)
{
    evbuffer_drain(in, f->frame_bytes);
}
