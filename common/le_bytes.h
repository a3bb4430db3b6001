/* Little-endian fields and an FNV-1a 64 checksum for the small files salus keeps on disk
 * (salusd's state file, a policy's saved state). Header only: the pure modules include it
 * without linking common. */
#ifndef SALUS_COMMON_LE_BYTES_H
#define SALUS_COMMON_LE_BYTES_H

#include <stddef.h>
#include <stdint.h>

static inline void le_put(uint8_t *at, uint64_t value, unsigned bytes)
{
    for (unsigned i = 0; i < bytes; i++)
        at[i] = (uint8_t)(value >> (8 * i));
}

static inline uint64_t le_get(const uint8_t *at, unsigned bytes)
{
    uint64_t value = 0;
    for (unsigned i = 0; i < bytes; i++)
        value |= (uint64_t)at[i] << (8 * i);
    return value;
}

static inline uint64_t le_fnv1a64(const uint8_t *bytes, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ bytes[i]) * 0x100000001b3ull;
    return h;
}

#endif
