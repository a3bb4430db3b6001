/* libFuzzer target for the frame decoder: the input is a byte stream as a peer would send
 * it; frames are cut by their length prefix and decoded, as salusd does. Build: see
 * tests/fuzz/CMakeLists.txt (clang only). Run: build/bin/fuzz-proto -max_total_time=600 */
#include "proto.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (pos < size) {
        uint32_t len;
        if (proto_frame_length(data + pos, size - pos, 4096, &len) != PROTO_OK)
            break;
        pos += PROTO_HEADER_BYTES;
        if (len > size - pos)
            break;
        proto_msg_t msg;
        if (proto_decode(data + pos, len, &msg, NULL) == PROTO_OK) {
            const char *s;
            size_t n;
            uint64_t u;
            int64_t i;
            char buf[32];
            (void)proto_get_str(&msg.body, "name", &s, &n);
            (void)proto_get_str_copy(&msg.body, "client", buf, sizeof(buf));
            (void)proto_get_uint(&msg.body, "version", &u);
            (void)proto_get_int(&msg.body, "priority", &i);
            proto_msg_free(&msg);
        }
        pos += len;
    }
    return 0;
}
