/* A native prototype of grain_core's window orders, for benchmarks/ab_window_orders.py --native
   only (grain_core does not build or ship it): the order of one window of n elements, n in
   [1, 65536], as grain_core.shuffle_cipher.shuffle_tables computes it with numpy.

   keys: the `rounds` round keys (the low byte of each std::seed_seq word, as the 16-bit block
   uses them); out[i]: index i's first landing in [0, n) when the cipher is cycle-walked from it;
   work: 4 * 65536 bytes of scratch owned by the caller. */
#include <stdint.h>

static inline uint8_t simon_f(uint8_t v) {
    uint8_t r1 = (uint8_t)((v << 1) | (v >> 7));
    uint8_t r2 = (uint8_t)((v << 2) | (v >> 6));
    return (uint8_t)((r1 & v) ^ r2); /* rotl(v, 8) is v itself on 8-bit words */
}

void window_order(const uint8_t *keys, int rounds, int n, int64_t *out, uint8_t *work) {
    uint8_t *left = work, *right = work + 65536;
    uint16_t *step = (uint16_t *)(work + 2 * 65536);
    for (int v = 0; v < 65536; v++) {
        left[v] = (uint8_t)(v >> 8);
        right[v] = (uint8_t)v;
    }
    for (int i = 0; i < rounds; i += 2) { /* one half-round per loop: each loop vectorises */
        uint8_t a = keys[i], b = keys[i + 1];
        for (int v = 0; v < 65536; v++) left[v] ^= simon_f(right[v]) ^ a;
        for (int v = 0; v < 65536; v++) right[v] ^= simon_f(left[v]) ^ b;
    }
    for (int v = 0; v < 65536; v++) step[v] = (uint16_t)((left[v] << 8) | right[v]);
    /* Cycle walks, 16 at a time so that their table reads overlap. */
    enum { LANES = 16 };
    int start[LANES];
    uint32_t at[LANES];
    int live = 0, next = 0;
    while (live < LANES && next < n) {
        start[live] = next;
        at[live++] = step[next++];
    }
    while (live) {
        for (int j = 0; j < live;) {
            uint32_t c = at[j];
            if (c >= (uint32_t)n) {
                at[j++] = step[c];
            } else {
                out[start[j]] = c;
                if (next < n) {
                    start[j] = next;
                    at[j++] = step[next++];
                } else {
                    live--;
                    start[j] = start[live];
                    at[j] = at[live];
                }
            }
        }
    }
}
