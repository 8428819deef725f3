/* Avro's encoding of a long (zig-zag, then a varint), for the C extensions that write
 * Avro: tidemark/core/_avroread.c (write_long, write_offset_position) and the processor's
 * fused loops. */
#ifndef TIDEMARK_AVRO_LONG_H
#define TIDEMARK_AVRO_LONG_H

#include <stdint.h>

/* number at out (at most 10 bytes): the length written. */
static inline int avro_encode_long(long long number, unsigned char *out) {
    uint64_t zigzag = ((uint64_t)number << 1) ^ (uint64_t)(number >> 63);
    int n = 0;
    while (zigzag > 0x7F) {
        out[n++] = (unsigned char)((zigzag & 0x7F) | 0x80);
        zigzag >>= 7;
    }
    out[n++] = (unsigned char)zigzag;
    return n;
}

#endif
