/* capi_config_test.c: tpcommConfig_t from callers whose struct is smaller than this header's
 * (an older or hand-made one). The library must take only the fields the caller's `size` covers
 * whole: a field that `size` cuts through or leaves out takes its default. The bytes of a field
 * cut by `size` are the caller's (another field of its own layout, or padding), filled here
 * with 0xA5, so a library that reads half a pointer gets 0x...a5a5a5a5 and crashes.
 * Prints "N passed, M failed"; exit status 1 on any failure (a crash fails the ctest too). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tpcomm/tpcomm_c.h"

static int gPassed, gFailed;

static void check(int ok, const char* what, size_t size, const char* detail) {
  if (ok) {
    ++gPassed;
    return;
  }
  ++gFailed;
  printf("FAIL size %zu: %s: %s\n", size, what, detail);
}

/* The fields of tpcommConfig_t after the header (size, magic, version), in order. */
typedef struct {
  const char* name;
  size_t offset, bytes;
} Field;
static const Field kFields[] = {
    {"timeoutMs", offsetof(tpcommConfig_t, timeoutMs), sizeof(int)},
    {"useNccl", offsetof(tpcommConfig_t, useNccl), sizeof(int)},
    {"algo", offsetof(tpcommConfig_t, algo), sizeof(const char*)},
    {"compression", offsetof(tpcommConfig_t, compression), sizeof(const char*)},
};

/* Every size from the header alone to the whole struct: the fields `size` covers whole hold good
 * values; the bytes after the last whole field, up to `size`, are 0xA5. A single-rank
 * communicator must come up (the cut fields at their defaults) and run an all-reduce. */
static void testEverySize(void) {
  tpcommUniqueId id;
  if (tpcommGetUniqueIdForAddress(&id, "127.0.0.1") != tpcommSuccess) {
    check(0, "unique id", 0, tpcommGetLastError(NULL));
    return;
  }
  for (size_t size = offsetof(tpcommConfig_t, timeoutMs); size <= sizeof(tpcommConfig_t); ++size) {
    unsigned char buf[sizeof(tpcommConfig_t) + 16];
    memset(buf, 0xA5, sizeof(buf));
    tpcommConfig_t good = TPCOMM_CONFIG_INITIALIZER;
    good.timeoutMs = 4000;
    good.useNccl = 0;
    good.algo = "staged_host";
    good.compression = "none";
    good.size = size;
    memcpy(buf, &good, offsetof(tpcommConfig_t, timeoutMs));
    for (size_t f = 0; f < sizeof(kFields) / sizeof(kFields[0]); ++f)
      if (kFields[f].offset + kFields[f].bytes <= size)
        memcpy(buf + kFields[f].offset, (const char*)&good + kFields[f].offset, kFields[f].bytes);
    tpcommComm_t comm = NULL;
    int r = tpcommCommInitRankConfig(&comm, 1, id, 0, -1, (const tpcommConfig_t*)buf);
    check(r == tpcommSuccess, "init", size, tpcommGetLastError(NULL));
    if (r != tpcommSuccess) continue;
    float x[4] = {1, -0.0f, 3, 4}, y[4] = {0};
    r = tpcommAllReduce(x, y, 4, tpcommFloat32, tpcommSum, comm, NULL);
    check(r == tpcommSuccess && y[0] == 1 && y[3] == 4, "all-reduce", size, tpcommGetLastError(comm));
    check(tpcommCommDestroy(comm) == tpcommSuccess, "destroy", size, tpcommGetLastError(NULL));
  }
}

/* A size that cannot hold the header (magic and version) is refused naming config->size, before
 * the library reads magic; so is an absurd one. */
static void testBadSizes(void) {
  tpcommUniqueId id;
  tpcommGetUniqueIdForAddress(&id, "127.0.0.1");
  const size_t bad[] = {0, 4, sizeof(size_t), offsetof(tpcommConfig_t, timeoutMs) - 1, (size_t)1 << 20, (size_t)-1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    tpcommConfig_t cfg = TPCOMM_CONFIG_INITIALIZER;
    cfg.size = bad[i];
    tpcommComm_t comm = NULL;
    int r = tpcommCommInitRankConfig(&comm, 1, id, 0, -1, &cfg);
    check(r == tpcommInvalidArgument && strstr(tpcommGetLastError(NULL), "config->size") != NULL, "bad size refused",
          bad[i], tpcommGetLastError(NULL));
    if (comm) tpcommCommDestroy(comm);
  }
}

int main(void) {
  testEverySize();
  testBadSizes();
  printf("%d passed, %d failed\n", gPassed, gFailed);
  return gFailed ? 1 : 0;
}
