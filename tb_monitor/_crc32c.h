/* TFRecord's masked CRC-32C (tb_monitor/logdir/tfrecord.py: masked_crc32c), the one C copy that
 * the accelerators framing records (sinks/_encoding.c) and reading them back
 * (logdir/_string_tensors.c) share; setup.py puts this folder on their include path. Call
 * crc32c_init() once at import.
 *
 * Why its own rather than google_crc32c: a record is ~40 bytes to a few KB, and calling back
 * into Python per record would cost more than the checksum itself. Castagnoli's polynomial,
 * reflected: by SSE 4.2's crc32 instruction where the CPU has it (every x86-64 of this decade),
 * else eight bytes a step by tables on little-endian hosts, else a byte a step. Tests compare it
 * with google_crc32c through the Python encoder and reader.
 */
#ifndef TB_MONITOR_CRC32C_H
#define TB_MONITOR_CRC32C_H

#include <stdint.h>
#include <string.h>

static uint32_t CRC32C_TABLES[8][256];

static uint32_t
crc32c_tables(uint32_t crc, const unsigned char *p, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= crc;
        crc = CRC32C_TABLES[7][word & 0xFF] ^ CRC32C_TABLES[6][(word >> 8) & 0xFF] ^
              CRC32C_TABLES[5][(word >> 16) & 0xFF] ^ CRC32C_TABLES[4][(word >> 24) & 0xFF] ^
              CRC32C_TABLES[3][(word >> 32) & 0xFF] ^ CRC32C_TABLES[2][(word >> 40) & 0xFF] ^
              CRC32C_TABLES[1][(word >> 48) & 0xFF] ^ CRC32C_TABLES[0][word >> 56];
    }
#endif
    while (n--) {
        crc = (crc >> 8) ^ CRC32C_TABLES[0][(crc ^ *p++) & 0xFF];
    }
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define TB_MONITOR_CRC32_INSTRUCTION 1

__attribute__((target("sse4.2"))) static uint32_t
crc32c_instruction(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t wide = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = _mm_crc32_u64(wide, word);
    }
    crc = (uint32_t)wide;
    while (n--) {
        crc = _mm_crc32_u8(crc, *p++);
    }
    return crc;
}
#endif

static uint32_t (*crc32c_update)(uint32_t, const unsigned char *, size_t) = crc32c_tables;

/* The tables filled, and the instruction chosen where the CPU has it. */
static void
crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int bit = 0; bit < 8; bit++) {
            crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
        }
        CRC32C_TABLES[0][i] = crc;
    }
    for (int t = 1; t < 8; t++) {
        for (int i = 0; i < 256; i++) {
            uint32_t before = CRC32C_TABLES[t - 1][i];
            CRC32C_TABLES[t][i] = (before >> 8) ^ CRC32C_TABLES[0][before & 0xFF];
        }
    }
#ifdef TB_MONITOR_CRC32_INSTRUCTION
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        crc32c_update = crc32c_instruction;
    }
#endif
}

/* TFRecord's masked CRC-32C of p[:n]: rotated and offset, as tfrecord.masked_crc32c. */
static uint32_t
masked_crc32c(const unsigned char *p, size_t n)
{
    uint32_t crc = ~crc32c_update(0xFFFFFFFFu, p, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

#endif /* TB_MONITOR_CRC32C_H */
