/* capi_test.c: the C API (tpcomm/tpcomm_c.h) from plain C, host ranks as threads of this
 * process meeting through the socket bootstrap on 127.0.0.1. A table of collective cases (add a
 * row to add one) with integer-valued inputs, so every result is exact and compared bitwise,
 * outputs poisoned first; then bad input, a rank that never arrives, a wrong secret, abort.
 * Prints "N passed, M failed"; exit status 1 on any failure. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpcomm/tpcomm_c.h"

static int gPassed, gFailed;

#define CHECK(cond, ...)                                     \
  do {                                                       \
    if (!(cond)) {                                           \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                   \
      printf("\n");                                          \
      return 1;                                              \
    }                                                        \
  } while (0)

static void report(const char* name, int failed) {
  printf("%s %s\n", failed ? "FAILED" : "ok    ", name);
  if (failed)
    ++gFailed;
  else
    ++gPassed;
}

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* --- element conversion (exact for the small integers used here) --------------------------- */
static uint16_t toHalf(float f) { /* normal values and zero, no rounding needed */
  uint32_t b;
  memcpy(&b, &f, 4);
  uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
  if ((b & 0x7fffffffu) == 0) return sign;
  int e = (int)((b >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)((b >> 13) & 0x3ffu));
}
static float fromHalf(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, b;
  b = (e == 0 && m == 0) ? sign : (sign | ((e - 15 + 127) << 23) | (m << 13));
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static uint16_t toBf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)(b >> 16);
}
static float fromBf16(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static size_t elemSize(int dt) { return dt == tpcommFloat32 ? 4 : 2; }
static void put(void* buf, int dt, size_t i, float v) {
  if (dt == tpcommFloat32)
    ((float*)buf)[i] = v;
  else if (dt == tpcommFloat16)
    ((uint16_t*)buf)[i] = toHalf(v);
  else
    ((uint16_t*)buf)[i] = toBf16(v);
}
static float get(const void* buf, int dt, size_t i) {
  if (dt == tpcommFloat32) return ((const float*)buf)[i];
  if (dt == tpcommFloat16) return fromHalf(((const uint16_t*)buf)[i]);
  return fromBf16(((const uint16_t*)buf)[i]);
}
/* Rank r's element i: small integers of both signs, different on every rank. */
static float input(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 5) % 17) - 8); }
static float reduce(int op, int n, size_t i) {
  float acc = input(0, i);
  for (int r = 1; r < n; ++r) {
    float v = input(r, i);
    acc = op == tpcommSum ? acc + v : op == tpcommMax ? (v > acc ? v : acc) : (v < acc ? v : acc);
  }
  return acc;
}

/* --- one rank per thread --------------------------------------------------------------------- */
enum Coll { kAllReduce, kAllReduceInPlace, kReduceScatter, kAllGather };
static const char* kCollNames[] = {"allreduce", "allreduce_inplace", "reduce_scatter", "allgather"};
typedef struct {
  enum Coll coll;
  int nranks, dtype, op;
  size_t count; /* allreduce: elements; reduce_scatter: per-rank result; allgather: per-rank input */
} Case;

typedef struct {
  const Case* c;
  tpcommUniqueId id;
  int rank, timeoutMs;
  int result;    /* tpcommResult_t of the first failing call, or of init */
  int wrong;     /* elements that differ from the expected value */
  char msg[512]; /* tpcommGetLastError of the failing call */
  char algo[64];
  double initMs;
} RankJob;

static void* runRank(void* arg) {
  RankJob* j = (RankJob*)arg;
  const Case* c = j->c;
  tpcommComm_t comm = NULL;
  tpcommConfig_t cfg = TPCOMM_CONFIG_INITIALIZER;
  cfg.timeoutMs = j->timeoutMs;
  double t0 = nowMs();
  j->result = tpcommCommInitRankConfig(&comm, c->nranks, j->id, j->rank, -1, &cfg);
  j->initMs = nowMs() - t0;
  if (j->result != tpcommSuccess) {
    snprintf(j->msg, sizeof(j->msg), "%s", tpcommGetLastError(NULL));
    return NULL;
  }
  size_t n = c->nranks, es = elemSize(c->dtype);
  size_t sendCount = c->coll == kReduceScatter ? n * c->count : c->count;
  size_t recvCount = c->coll == kAllGather ? n * c->count : c->coll == kReduceScatter ? c->count : c->count;
  char* send = malloc(sendCount * es + 1);
  char* recv = malloc(recvCount * es + 1);
  for (size_t i = 0; i < sendCount; ++i) put(send, c->dtype, i, input(j->rank, i));
  memset(recv, 0x7f, recvCount * es); /* poison: NaN-ish / huge in every type */
  switch (c->coll) {
    case kAllReduce:
      j->result = tpcommAllReduce(send, recv, c->count, c->dtype, c->op, comm, NULL);
      break;
    case kAllReduceInPlace:
      j->result = tpcommAllReduce(send, send, c->count, c->dtype, c->op, comm, NULL);
      memcpy(recv, send, recvCount * es);
      break;
    case kReduceScatter:
      j->result = tpcommReduceScatter(send, recv, c->count, c->dtype, c->op, comm, NULL);
      break;
    case kAllGather:
      j->result = tpcommAllGather(send, recv, c->count, c->dtype, comm, NULL);
      break;
  }
  if (j->result != tpcommSuccess) snprintf(j->msg, sizeof(j->msg), "%s", tpcommGetLastError(comm));
  snprintf(j->algo, sizeof(j->algo), "%s", tpcommCommLastAlgorithm(comm));
  for (size_t i = 0; j->result == tpcommSuccess && i < recvCount; ++i) {
    float want;
    if (c->coll == kAllGather)
      want = input((int)(i / c->count), i % c->count);
    else if (c->coll == kReduceScatter)
      want = reduce(c->op, c->nranks, (size_t)j->rank * c->count + i);
    else
      want = reduce(c->op, c->nranks, i);
    float got = get(recv, c->dtype, i);
    if (memcmp(&got, &want, 4) != 0) ++j->wrong;
  }
  free(send);
  free(recv);
  int d = tpcommCommDestroy(comm);
  if (j->result == tpcommSuccess && d != tpcommSuccess) {
    j->result = d;
    snprintf(j->msg, sizeof(j->msg), "destroy: %s", tpcommGetLastError(NULL));
  }
  return NULL;
}

/* Runs ranks [0, present) of case c as threads; returns them in jobs. */
static void runGroup(const Case* c, tpcommUniqueId id, int present, int timeoutMs, RankJob* jobs) {
  pthread_t th[16];
  for (int r = 0; r < present; ++r) {
    memset(&jobs[r], 0, sizeof(jobs[r]));
    jobs[r].c = c;
    jobs[r].id = id;
    jobs[r].rank = r;
    jobs[r].timeoutMs = timeoutMs;
    pthread_create(&th[r], NULL, runRank, &jobs[r]);
  }
  for (int r = 0; r < present; ++r) pthread_join(th[r], NULL);
}

static int newId(tpcommUniqueId* id) {
  int r = tpcommGetUniqueIdForAddress(id, "127.0.0.1");
  if (r != tpcommSuccess) printf("tpcommGetUniqueIdForAddress: %s\n", tpcommGetLastError(NULL));
  return r;
}

static int testCase(const Case* c) {
  tpcommUniqueId id;
  CHECK(newId(&id) == tpcommSuccess, "no id");
  RankJob jobs[16];
  runGroup(c, id, c->nranks, 20000, jobs);
  for (int r = 0; r < c->nranks; ++r) {
    CHECK(jobs[r].result == tpcommSuccess, "rank %d: %s", r, jobs[r].msg);
    CHECK(jobs[r].wrong == 0, "rank %d: %d wrong elements (algo %s)", r, jobs[r].wrong, jobs[r].algo);
    CHECK(strcmp(jobs[r].algo, "staged_host") == 0, "rank %d ran %s", r, jobs[r].algo);
  }
  return 0;
}

/* --- the rest ---------------------------------------------------------------------------------- */
static int testVersion(void) {
  int v = -1, api = -1;
  CHECK(tpcommGetVersion(&v, &api) == tpcommSuccess, "%s", tpcommGetLastError(NULL));
  CHECK(v >= 100 && api == TPCOMM_C_API_VERSION, "version %d api %d", v, api);
  CHECK(tpcommGetVersion(NULL, NULL) == tpcommInvalidArgument, "NULL version accepted");
  CHECK(strstr(tpcommGetLastError(NULL), "version is NULL") != NULL, "%s", tpcommGetLastError(NULL));
  return 0;
}

static int expectInvalid(int got, const char* needle) {
  const char* msg = tpcommGetLastError(NULL);
  CHECK(got == tpcommInvalidArgument, "result %d (%s), wanted tpcommInvalidArgument", got, msg);
  CHECK(strstr(msg, needle) != NULL, "message '%s' lacks '%s'", msg, needle);
  return 0;
}

static int testBadInput(void) {
  tpcommUniqueId id;
  CHECK(newId(&id) == tpcommSuccess, "no id");
  tpcommComm_t comm = (tpcommComm_t)1;
  float x[4] = {0};
  if (expectInvalid(tpcommCommInitRank(NULL, 2, id, 0, -1), "comm is NULL")) return 1;
  if (expectInvalid(tpcommCommInitRank(&comm, 0, id, 0, -1), "nranks 0")) return 1;
  CHECK(comm == NULL, "comm not cleared on failure");
  if (expectInvalid(tpcommCommInitRank(&comm, 2, id, 2, -1), "rank 2 out of range")) return 1;
  if (expectInvalid(tpcommCommInitRank(&comm, 2, id, 0, -2), "device -2")) return 1;
  tpcommConfig_t cfg = TPCOMM_CONFIG_INITIALIZER;
  cfg.magic = 0;
  if (expectInvalid(tpcommCommInitRankConfig(&comm, 1, id, 0, -1, &cfg), "config->magic")) return 1;
  cfg.magic = TPCOMM_CONFIG_MAGIC;
  cfg.timeoutMs = -5;
  if (expectInvalid(tpcommCommInitRankConfig(&comm, 1, id, 0, -1, &cfg), "config->timeoutMs -5")) return 1;
  cfg.timeoutMs = 0;
  cfg.compression = "zstd";
  if (expectInvalid(tpcommCommInitRankConfig(&comm, 1, id, 0, -1, &cfg), "config->compression 'zstd'")) return 1;
  tpcommUniqueId junk;
  memset(&junk, 0xab, sizeof(junk));
  if (expectInvalid(tpcommCommInitRank(&comm, 2, junk, 1, -1), "not a tpcomm socket unique id")) return 1;
  if (expectInvalid(tpcommGetUniqueIdForAddress(&junk, "not-an-address"), "not-an-address")) return 1;
  if (expectInvalid(tpcommAllReduce(x, x, 4, tpcommFloat32, tpcommSum, NULL, NULL), "comm is NULL")) return 1;

  /* One real rank: bad dtype and op name the argument; a config from an older, smaller header
   * (size covering only timeoutMs) is accepted. */
  struct {
    size_t size;
    unsigned int magic, version;
    int timeoutMs;
  } oldCfg = {sizeof(oldCfg), TPCOMM_CONFIG_MAGIC, 1, 3000};
  CHECK(tpcommCommInitRankConfig(&comm, 1, id, 0, -1, (const tpcommConfig_t*)&oldCfg) == tpcommSuccess, "%s",
        tpcommGetLastError(NULL));
  if (expectInvalid(tpcommAllReduce(x, x, 4, 7, tpcommSum, comm, NULL), "datatype 7")) return 1;
  if (expectInvalid(tpcommAllReduce(x, x, 4, tpcommFloat32, 9, comm, NULL), "op 9")) return 1;
  if (expectInvalid(tpcommReduceScatter(x, x, 4, tpcommFloat32, -1, comm, NULL), "op -1")) return 1;
  if (expectInvalid(tpcommReduceScatter(x, x, 4, -1, tpcommSum, comm, NULL), "datatype -1")) return 1;
  if (expectInvalid(tpcommAllGather(x, x, 4, 3, comm, NULL), "datatype 3")) return 1;
  /* Per-call compression (API version 3): a bad name is refused naming it; NULL, "none" and
   * "fp8" run (one rank: a copy, whatever the wire). */
  if (expectInvalid(tpcommAllReduceCompressed(x, x, 4, tpcommFloat32, tpcommSum, "fp4", comm, NULL), "'fp4'"))
    return 1;
  CHECK(tpcommAllReduceCompressed(x, x, 4, tpcommFloat32, tpcommSum, NULL, comm, NULL) == tpcommSuccess, "%s",
        tpcommGetLastError(NULL));
  CHECK(tpcommAllReduceCompressed(x, x, 4, tpcommFloat32, tpcommSum, "none", comm, NULL) == tpcommSuccess, "%s",
        tpcommGetLastError(NULL));
  CHECK(tpcommAllReduceCompressed(x, x, 4, tpcommFloat32, tpcommSum, "fp8", comm, NULL) == tpcommSuccess, "%s",
        tpcommGetLastError(NULL));
  int got = tpcommAllReduce(NULL, x, 4, tpcommFloat32, tpcommSum, comm, NULL);
  CHECK(got == tpcommInvalidArgument, "null send accepted: %d", got);
  int rank = -1, count = -1, dev = 5;
  CHECK(tpcommCommUserRank(comm, &rank) == 0 && rank == 0, "rank %d", rank);
  CHECK(tpcommCommCount(comm, &count) == 0 && count == 1, "count %d", count);
  CHECK(tpcommCommDevice(comm, &dev) == 0 && dev == -1, "device %d", dev);
  int async = -1;
  CHECK(tpcommCommGetAsyncError(comm, &async) == 0 && async == tpcommSuccess, "async %d", async);
  CHECK(tpcommCommDestroy(comm) == tpcommSuccess, "%s", tpcommGetLastError(NULL));
  CHECK(strcmp(tpcommGetErrorString(tpcommTimeout), "") != 0 && strstr(tpcommGetErrorString(tpcommTimeout), "Timeout"),
        "error string");
  CHECK(strstr(tpcommGetErrorString(1234), "unknown") != NULL, "unknown code");
  return 0;
}

/* 3 ranks, rank 2 never arrives: ranks 0 and 1 fail with tpcommTimeout within the bound
 * (timeout + 1 s grace for non-root ranks + slack), the message naming rank 2. */
static int testMissingRank(void) {
  tpcommUniqueId id;
  CHECK(newId(&id) == tpcommSuccess, "no id");
  Case c = {kAllReduce, 3, tpcommFloat32, tpcommSum, 8};
  RankJob jobs[3];
  const int timeoutMs = 1500;
  double t0 = nowMs();
  runGroup(&c, id, 2, timeoutMs, jobs);
  double took = nowMs() - t0;
  for (int r = 0; r < 2; ++r) {
    CHECK(jobs[r].result == tpcommTimeout, "rank %d: result %d: %s", r, jobs[r].result, jobs[r].msg);
    CHECK(strstr(jobs[r].msg, "rank 2") != NULL, "rank %d: message does not name rank 2: %s", r, jobs[r].msg);
  }
  CHECK(took < timeoutMs + 1000 + 2000, "took %.0f ms", took);
  CHECK(took >= timeoutMs - 50, "gave up early: %.0f ms", took);
  return 0;
}

/* The root is the one missing: rank 1 names rank 0. */
static int testMissingRoot(void) {
  tpcommUniqueId id;
  CHECK(newId(&id) == tpcommSuccess, "no id");
  tpcommComm_t comm = NULL;
  tpcommConfig_t cfg = TPCOMM_CONFIG_INITIALIZER;
  cfg.timeoutMs = 800;
  double t0 = nowMs();
  int r = tpcommCommInitRankConfig(&comm, 2, id, 1, -1, &cfg);
  double took = nowMs() - t0;
  CHECK(r == tpcommTimeout, "result %d: %s", r, tpcommGetLastError(NULL));
  CHECK(strstr(tpcommGetLastError(NULL), "rank 0") != NULL, "%s", tpcommGetLastError(NULL));
  CHECK(took < 800 + 2000, "took %.0f ms", took);
  return 0;
}

/* An id with the right address but another secret is refused; the real rank 1 still joins. */
typedef struct {
  tpcommUniqueId id;
  int rank, result;
  char msg[512];
} Joiner;
static void* join2(void* arg) {
  Joiner* j = (Joiner*)arg;
  tpcommComm_t comm = NULL;
  tpcommConfig_t cfg = TPCOMM_CONFIG_INITIALIZER;
  cfg.timeoutMs = 5000;
  j->result = tpcommCommInitRankConfig(&comm, 2, j->id, j->rank, -1, &cfg);
  snprintf(j->msg, sizeof(j->msg), "%s", tpcommGetLastError(NULL));
  if (j->result == tpcommSuccess) {
    float v[3] = {1, 2, 3};
    j->result = tpcommAllReduce(v, v, 3, tpcommFloat32, tpcommSum, comm, NULL);
    if (j->result == tpcommSuccess && (v[0] != 2 || v[2] != 6)) j->result = -1;
    tpcommCommDestroy(comm);
  }
  return NULL;
}
static int testWrongSecret(void) {
  tpcommUniqueId id;
  CHECK(newId(&id) == tpcommSuccess, "no id");
  Joiner root = {id, 0, -1, ""}, thief = {id, 1, -1, ""}, real = {id, 1, -1, ""};
  thief.id.internal[40] ^= 0x5a; /* inside the secret */
  pthread_t t0, t1;
  pthread_create(&t0, NULL, join2, &root);
  join2(&thief); /* refused at once, not at the timeout */
  CHECK(thief.result == tpcommRemoteError, "impostor result %d: %s", thief.result, thief.msg);
  CHECK(strstr(thief.msg, "wrong secret") != NULL, "%s", thief.msg);
  pthread_create(&t1, NULL, join2, &real);
  pthread_join(t0, NULL);
  pthread_join(t1, NULL);
  CHECK(root.result == tpcommSuccess, "root: %d %s", root.result, root.msg);
  CHECK(real.result == tpcommSuccess, "rank 1: %d %s", real.result, real.msg);
  return 0;
}

/* Abort is local: rank 1 aborts while rank 0 waits in a collective; rank 0 then fails fast
 * (the connection closed) instead of at its timeout, and its destroy returns too. */
typedef struct {
  tpcommUniqueId id;
  int rank, initResult, collResult, destroyResult;
  double collMs;
  char msg[512];
} AbortJob;
static void* abortRank(void* arg) {
  AbortJob* j = (AbortJob*)arg;
  tpcommComm_t comm = NULL;
  tpcommConfig_t cfg = TPCOMM_CONFIG_INITIALIZER;
  cfg.timeoutMs = 3000;
  j->initResult = tpcommCommInitRankConfig(&comm, 2, j->id, j->rank, -1, &cfg);
  if (j->initResult != tpcommSuccess) {
    snprintf(j->msg, sizeof(j->msg), "%s", tpcommGetLastError(NULL));
    return NULL;
  }
  if (j->rank == 1) {
    j->destroyResult = tpcommCommAbort(comm);
    return NULL;
  }
  float v[4] = {1, 2, 3, 4};
  double t0 = nowMs();
  /* A host all-reduce whose peer is gone: bounded by the timeout in the transport; the destroy
   * after it must not wait for the aborted peer beyond its bounded barrier. */
  j->collResult = tpcommAllReduce(v, v, 4, tpcommFloat32, tpcommSum, comm, NULL);
  snprintf(j->msg, sizeof(j->msg), "%s", tpcommGetLastError(NULL));
  j->destroyResult = tpcommCommDestroy(comm);
  j->collMs = nowMs() - t0;
  return NULL;
}
static int testAbort(void) {
  tpcommUniqueId id;
  CHECK(newId(&id) == tpcommSuccess, "no id");
  AbortJob a = {id, 0, -1, -1, -1, 0, ""}, b = {id, 1, -1, -1, -1, 0, ""};
  pthread_t t0, t1;
  double start = nowMs();
  pthread_create(&t0, NULL, abortRank, &a);
  pthread_create(&t1, NULL, abortRank, &b);
  pthread_join(t1, NULL);
  double abortDone = nowMs() - start;
  pthread_join(t0, NULL);
  CHECK(a.initResult == tpcommSuccess && b.initResult == tpcommSuccess, "init: %s %s", a.msg, b.msg);
  CHECK(b.destroyResult == tpcommSuccess, "abort returned %d", b.destroyResult);
  CHECK(abortDone < 5000, "abort took %.0f ms", abortDone);
  CHECK(a.collResult != tpcommSuccess, "all-reduce with an aborted peer succeeded");
  CHECK(a.destroyResult != tpcommSuccess, "destroy after a peer aborted reported success");
  CHECK(a.collMs < 3000 + 5000, "rank 0 took %.0f ms", a.collMs);
  return 0;
}

/* The largest timeout is a long bound, not an overflow into an immediate timeout. */
static int testHugeTimeout(void) {
  tpcommUniqueId id;
  CHECK(newId(&id) == tpcommSuccess, "no id");
  Case c = {kAllReduce, 2, tpcommFloat32, tpcommSum, 64};
  RankJob jobs[2];
  runGroup(&c, id, 2, 2147483647, jobs);
  for (int r = 0; r < 2; ++r)
    CHECK(jobs[r].result == tpcommSuccess && jobs[r].wrong == 0, "rank %d: %s", r, jobs[r].msg);
  return 0;
}

static const Case kCases[] = {
    /* coll, nranks, dtype, op, count */
    {kAllReduce, 2, tpcommFloat32, tpcommSum, 1000},   {kAllReduce, 2, tpcommFloat16, tpcommMax, 1000},
    {kAllReduce, 2, tpcommBfloat16, tpcommMin, 1000},  {kAllReduceInPlace, 3, tpcommFloat32, tpcommSum, 777},
    {kAllReduce, 3, tpcommBfloat16, tpcommSum, 5},     {kAllReduce, 4, tpcommFloat16, tpcommSum, 70000},
    {kAllReduce, 4, tpcommFloat32, tpcommMin, 1},      {kReduceScatter, 2, tpcommFloat32, tpcommSum, 300},
    {kReduceScatter, 3, tpcommFloat16, tpcommMax, 33}, {kReduceScatter, 4, tpcommBfloat16, tpcommMin, 64},
    {kAllGather, 2, tpcommFloat32, tpcommSum, 100},    {kAllGather, 3, tpcommBfloat16, tpcommSum, 7},
    {kAllGather, 4, tpcommFloat16, tpcommSum, 1025},
};

int main(void) {
  char name[128];
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    const Case* c = &kCases[i];
    static const char* dt[] = {"f32", "f16", "bf16"};
    static const char* op[] = {"sum", "max", "min"};
    snprintf(name, sizeof(name), "%s ranks=%d %s %s count=%zu", kCollNames[c->coll], c->nranks, dt[c->dtype], op[c->op],
             c->count);
    report(name, testCase(c));
  }
  report("version", testVersion());
  report("bad_input", testBadInput());
  report("missing_rank_times_out_naming_it", testMissingRank());
  report("missing_root_times_out_naming_it", testMissingRoot());
  report("wrong_secret_refused", testWrongSecret());
  report("abort_is_local", testAbort());
  report("huge_timeout", testHugeTimeout());
  printf("%d passed, %d failed\n", gPassed, gFailed);
  return gFailed ? 1 : 0;
}
