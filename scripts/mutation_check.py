#!/usr/bin/env python3
"""Shows that the tests written for fixed defects fail when a defect comes back (a test that
cannot fail proves nothing): each mutant puts one defect back into the source (a textual
edit of the fix, one or more edits, each of whose fix text must occur exactly once), rebuilds
incrementally, runs the tests written for that defect, and expects them to FAIL; every edited
file is restored after each mutant (also on errors and Ctrl-C), and the last step rebuilds and
runs the same tests unmutated, expecting them to pass.

    python3 scripts/mutation_check.py BUILD_DIR [--cpu] [--only NAME,...] [--log FILE] [--check]

GPU mutants (the default): run on a GPU machine after a full build of BUILD_DIR
(scripts/gpu.sh tests makes one); each rebuilds tpcomm_gpu_tests and runs a gtest filter of it.
Multicast stays off (NCCL_NVLS_ENABLE=0 ... are exported here too).

CPU mutants (--cpu): run anywhere the CPU tests run (CI's machine; mpirun for the MPI ones),
after a full build of BUILD_DIR; each rebuilds its targets with ninja (all of them for a
CMakeLists.txt edit) and runs `ctest -R REGEX` in BUILD_DIR and/or a test executable with a
gtest filter. Results: bench/results/ci-vm-2core.md and bench/results/h200x1.md.

--check only verifies that every chosen mutant's fix text is in the source once (no build).
It edits the working tree in place: run it on a copy or a clean checkout, never on one with
uncommitted work."""
import argparse
import datetime
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, item (the defect's number in docs/reliability.md's list), file, text of the fix, the defect put back, tests that must fail[, a
# command the test binary runs under (e.g. compute-sanitizer)].
MUTANTS = [
    ("poison_ignored", 13, "src/algos/p2p/p2p_common.cuh",
     "  *deadline = globalTimerNs() + p.timeoutNs;\n  return poison == 0;",
     "  *deadline = globalTimerNs() + p.timeoutNs;\n  return true;",
     "P2p/GpuFault.LateRankThenCallsAndReplaysNeverWrong/*"),
    ("streams_unordered", 14, "src/collectives/call_path.cc",
     "  if (!impl.haveLastStream || a.stream == impl.lastStream) {",
     "  if (true) {",
     "P2p/GpuFault.TwoStreamsAreOrdered/*"),
    ("pdl_wait_counted", 16, "src/algos/p2p/oneshot_p2p.cu",
     "  dev::pdlWait();  // inputs and the epoch may come from the previous kernel\n"
     "  uint64_t deadline;\n  if (!dev::p2pBegin(p, &deadline)) return;",
     "  uint64_t deadline;\n  const uint64_t startedNs = dev::globalTimerNs();\n  dev::pdlWait();\n"
     "  if (!dev::p2pBegin(p, &deadline)) return;\n  deadline = startedNs + p.timeoutNs;",
     "P2p/GpuFault.PdlWaitIsNotCountedAgainstTheTimeout/1"),
    # Lamport's own -0.0 unscrubbed alone is covered by the zero rule of every reduction (the
    # mutant survives on its own); item 17's defect needs both gone.
    ("lamport_own_zero_unscrubbed", 17, "src/algos/p2p/lamport_p2p.cu",
     "        in[r] = dev::lamportScrub<T>(loadUserPack<T, kVec>(p.send, i, p.count));\n        continue;",
     "        in[r] = loadUserPack<T, kVec>(p.send, i, p.count);\n        continue;",
     "All/SignedZeros.*"),
    ("zero_rule_removed", 17, "src/algos/common/device_common.cuh",
     "    for (int i = 0; i < kElems; ++i) f[i] = __fadd_rn(f[i], 0.0f);\n  }",
     "    for (int i = 0; i < kElems; ++i) f[i] = f[i];\n  }",
     "All/SignedZeros.*"),
    # The create-time residency check removed.
    ("residency_unchecked", 19, "src/collectives/bring_up.cc",
     "    if (me.smCount > 0 && residentBlocksPerSm() > 0 && need > capacity)",
     "    if (me.smCount < 0 && need > capacity)",
     "Residency.*"),
    # A Lamport thread whose wait failed leaves alone while the rest of its block reaches
    # finish's barrier. Survives (one H200, under synccheck; a 7th field: the wrapper): no test
    # can fail on it (sm_80 on), docs/reliability.md says why (item 18). Kept to show the fix
    # text is in place.
    ("lamport_thread_leaves_alone", 18, "src/algos/p2p/lamport_p2p.cu",
     "  if (__syncthreads_or(!ok)) return;",
     "  if (!ok) return;",
     "AllReduceTimeout.MissingPeerReportsTimeout",
     ["compute-sanitizer", "--tool", "synccheck", "--error-exitcode", "9"]),
    ("gpu_signature_unchecked", 7, "src/algos/p2p/p2p_common.cuh",
     "  if (!p.signature) return true;\n  __shared__ int bad;",
     "  return true;\n  __shared__ int bad;",
     "P2p/GpuFault.MismatchedCallsAreCaughtOnTheGpu/*"),
]


# CPU mutants: name, item, edits [(file, text of the fix, the defect put back)], ninja
# targets to rebuild ([] = all), tests: ("ctest", REGEX) runs `ctest -R REGEX` in the build dir,
# ("gtest", EXECUTABLE relative to the build dir, FILTER) runs it with --gtest_filter. A mutant
# is caught when any of its tests fails; unmutated, all of them must pass.
CPU_MUTANTS = [
    # 1: a late rank passes the host_staged barrier its timed-out peer broke (the timed-out
    # arrival still counted), then uses the stale pointers: the "32768 of 65536".
    dict(name="staged_barrier_ignores_broken", item=1,
         edits=[("src/transports/host_staged.cc",
                 "  for (;;) {  // arrive\n    if (st & kBroken) return brokenBarrier();\n    round =",
                 "  for (;;) {  // arrive\n    round =")],
         targets=["tpcomm_fault_staged_late_rank"], tests=[("ctest", "^tpcomm_fault_staged_late_rank$")]),
    # 1: the rank whose barrier wait expired returns while peers still write into its recv.
    dict(name="staged_timeout_no_write_fence", item=1,
         edits=[("src/transports/host_staged.cc",
                 "    while (h->peerAccesses.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();\n"
                 "    std::string missing;",
                 "    std::string missing;")],
         targets=["tpcomm_fault_staged_write_phase"], tests=[("ctest", "^tpcomm_fault_staged_write_phase$")]),
    # 1: the thread bootstrap lets a rank join an exchange its peer abandoned.
    dict(name="thread_bootstrap_late_joins", item=1,
         edits=[("src/bootstrap/thread_bootstrap.cc", "    if (abandoned(k)) return lateArrival(rank, k);\n", "")],
         targets=["tpcomm_fault_thread_bootstrap"],
         tests=[("gtest", "tests/fault/tpcomm_fault_thread_bootstrap", "ThreadBootstrapFault.*")]),
    # 2: CMake's chrpath padding (":::") back in the build tree's RUNPATHs.
    dict(name="runpath_padded", item=2,
         edits=[("CMakeLists.txt", "PROPERTIES BUILD_WITH_INSTALL_RPATH TRUE)", "PROPERTIES BUILD_WITH_INSTALL_RPATH FALSE)")],
         targets=[], tests=[("ctest", "^tpcomm_runpath$")]),
    # 3: the format read with value() outside the try: {"format":1} throws type_error.302.
    dict(name="cache_format_outside_try", item=3,
         edits=[("src/topology/machine_probe.cc",
                 "  MachineProbe m;\n  try {\n    if (getString(j, \"format\") != \"tpcomm-machine-probe-1\")\n"
                 "      return TPCOMM_INVALID(\"machine probe JSON: format is not tpcomm-machine-probe-1\");\n",
                 "  if (j.value(\"format\", std::string()) != \"tpcomm-machine-probe-1\")\n"
                 "    return TPCOMM_INVALID(\"machine probe JSON: format is not tpcomm-machine-probe-1\");\n"
                 "  MachineProbe m;\n  try {\n")],
         targets=["tpcomm_fault_inputs"],
         tests=[("gtest", "tests/fault/tpcomm_fault_inputs", "CorruptCache.EveryBadFileIsAMissWithAReason")]),
    # 3: a blocking open: a FIFO in place of the cache file hangs.
    dict(name="cache_open_blocks", item=3,
         edits=[("src/topology/topo_cache.cc", "O_RDONLY | O_NONBLOCK | O_CLOEXEC", "O_RDONLY | O_CLOEXEC")],
         targets=["tpcomm_fault_inputs"],
         tests=[("gtest", "tests/fault/tpcomm_fault_inputs", "CorruptCache.FifoAtThePathDoesNotHang")]),
    # 4: size parameters without a range (TPCOMM_STAGED_CHUNK_BYTES=2^60, 2^62 accepted).
    dict(name="size_params_unbounded", item=4,
         edits=[("src/common/params.cc",
                 "  if (v < static_cast<uint64_t>(p.min) || v > static_cast<uint64_t>(p.max)) return false;",
                 "  if (p.kind != ParamKind::kSize && (v < static_cast<uint64_t>(p.min) || v > static_cast<uint64_t>(p.max)))\n"
                 "    return false;")],
         targets=["tpcomm_fault_inputs", "tpcomm_unit_core"],
         tests=[("gtest", "tests/fault/tpcomm_fault_inputs", "HostileParams.*"),
                ("gtest", "tests/unit/tpcomm_unit_core", "Params*")]),
    # 5: a timed-out MPI bootstrap frees its communicator with the collective still pending.
    dict(name="mpi_comm_freed_with_pending", item=5,
         edits=[("src/bootstrap/mpi_bootstrap.cc",
                 "        retain(pending_);\n        pending_ = nullptr;\n        return;\n      }",
                 "        retain(pending_);\n        pending_ = nullptr;\n      }")],
         targets=["tpcomm_mpi_bootstrap_fault"], tests=[("ctest", "^tpcomm_mpi_bootstrap_fault_np[24]$")]),
    # 5: the timed-out collective's buffers freed while MPI may still complete it (late ranks),
    # and with no op pending the destructor frees the communicator too.
    dict(name="mpi_pending_op_freed", item=5,
         edits=[("src/bootstrap/mpi_bootstrap.cc", "      pending_ = op;  // still pending: kept alive with its buffers",
                 "      delete op;")],
         targets=["tpcomm_mpi_bootstrap_fault"], tests=[("ctest", "^tpcomm_mpi_bootstrap_fault_np[24]$")]),
    # 5, 10: makeMpiBootstrap's MPI_Comm_dup unbounded (a rank whose peers never call it blocks).
    dict(name="mpi_dup_unbounded", item=10,
         edits=[("src/bootstrap/mpi_bootstrap.cc", "  if (MPI_Comm_idup(comm, dup, &req) != MPI_SUCCESS) {",
                 "  if (MPI_Comm_dup(comm, dup) != MPI_SUCCESS) {")],
         targets=["tpcomm_mpi_bootstrap_fault"], tests=[("ctest", "^tpcomm_mpi_bootstrap_fault_np2$")]),
    # 6: nothing removes a dead process's /dev/shm segment (neither create nor --clean).
    dict(name="shm_stale_never_removed", item=6,
         edits=[("src/transports/host_staged.cc", "  DIR* d = opendir(\"/dev/shm\");", "  DIR* d = nullptr;")],
         targets=["tpcomm_unit_host_comm", "tpcomm-doctor"],
         tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "ShmCleanup.*"), ("ctest", "^doctor_clean$")]),
    # 6: create no longer cleans up (tpcomm-doctor --clean still does).
    dict(name="shm_not_cleaned_at_create", item=6,
         edits=[("src/transports/host_staged.cc",
                 "      removeStaleSegments(nullptr);  // a crashed run's leftovers; ours are named by our own pid\n", "")],
         targets=["tpcomm_unit_host_comm", "tpcomm_mpi_collectives", "tpcomm-doctor"],
         tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "ShmCleanup.*"), ("ctest", "^doctor_clean$"),
                ("ctest", "^tpcomm_mpi_collectives_np2$")]),
    # 7: host call signatures exchanged but never compared.
    dict(name="host_signature_unchecked", item=7,
         edits=[("src/algos/staged_host/staged_host.cc", "  std::string diff;\n  for (int r = 1; r < n; ++r)",
                 "  std::string diff;\n  if (false)\n  for (int r = 1; r < n; ++r)")],
         targets=["tpcomm_unit_host_comm"],
         tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "CallSignature.*")]),
    # 8: the decoder's JSON parsers take any nesting depth.
    dict(name="decoder_json_depth_unbounded", item=8,
         edits=[("examples/qwen_tp/json_limits.h", "      if (++depth > maxDepth) {", "      if (++depth > maxDepth && false) {")],
         targets=["qwen_config_test", "qwen_safetensors_test"],
         tests=[("ctest", "^qwen_(config|safetensors)_test$")]),
    # 9: integer parameters without a range (TPCOMM_TIMEOUT_MS 2^32 -> 0 ms, 0 accepted, slots=-1).
    dict(name="int_params_unbounded", item=9,
         edits=[("src/common/params.cc",
                 "  if (v < static_cast<uint64_t>(p.min) || v > static_cast<uint64_t>(p.max)) return false;",
                 "  if (p.kind != ParamKind::kInt && (v < static_cast<uint64_t>(p.min) || v > static_cast<uint64_t>(p.max)))\n"
                 "    return false;")],
         targets=["tpcomm_fault_inputs", "tpcomm_unit_core", "tpcomm-doctor"],
         tests=[("gtest", "tests/fault/tpcomm_fault_inputs", "HostileParams.*"),
                ("gtest", "tests/unit/tpcomm_unit_core", "Params*"), ("ctest", "^doctor_bad_params")]),
    # 9: the socket bootstrap's deadline (timeout + grace) in int: overflows near INT32_MAX ms.
    dict(name="socket_deadline_int", item=9,
         edits=[("src/bootstrap/socket_bootstrap.cc", "return Deadline(static_cast<int64_t>(timeoutMs_) + extraMs);",
                 "return Deadline(timeoutMs_ + extraMs);")],
         targets=["capi_test"], tests=[("ctest", "^capi_test$")]),
    # 10: the thread bootstrap's timeout names the waiting rank, not the missing ones.
    dict(name="thread_timeout_names_waiter", item=10,
         edits=[("src/bootstrap/thread_bootstrap.cc", "      std::vector<int> missing = missingRanks();",
                 "      std::vector<int> missing{rank};")],
         targets=["tpcomm_fault_thread_bootstrap"],
         tests=[("gtest", "tests/fault/tpcomm_fault_thread_bootstrap", "ThreadBootstrapFault.RanksThatNeverArriveAreNamed")]),
    # 10: host_staged's timeout names the waiting rank, not the missing ones.
    dict(name="staged_timeout_names_waiter", item=10,
         edits=[("src/transports/host_staged.cc",
                 "      if (h->arrivedRound[r].load(std::memory_order_relaxed) != static_cast<uint32_t>(round + 1)) {",
                 "      if (r == rank_) {")],
         targets=["tpcomm_unit_timeout"], tests=[("ctest", "^tpcomm_unit_timeout$")]),
    # 11: every rank contributes an n x n block to the topology allGather (n^3 in all); the rows
    # still land right, so only the test's size bound can tell.
    dict(name="topology_exchange_n3", item=11,
         edits=[("src/topology/probe.cc", "std::vector<LinkRecord> contribution(n), gathered(nn);",
                 "std::vector<LinkRecord> contribution(nn), gathered(nn * n);"),
                ("src/topology/probe.cc", "gathered.data(), sizeof(LinkRecord) * n));",
                 "gathered.data(), sizeof(LinkRecord) * nn));"),
                ("src/topology/probe.cc", "&gathered[static_cast<size_t>(l) * n]", "&gathered[static_cast<size_t>(l) * nn]")],
         targets=["tpcomm_unit_topology_exchange"], tests=[("ctest", "^tpcomm_unit_topology_exchange$")]),
    # 12: partially overlapping send/recv accepted.
    dict(name="overlap_accepted", item=12,
         edits=[("src/collectives/call_checks.cc", "  if (apart || inPlace) return Status::kOk;", "  return Status::kOk;")],
         targets=["tpcomm_unit_host_comm"],
         tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "BadInput.BadCallsAreRejectedAndTheCommunicatorStaysUsable")]),
    # 12: a forced algorithm host ranks cannot run (ring_nccl) silently falls back.
    dict(name="forced_algo_unwarned", item=12,
         edits=[("src/collectives/communicator.cc",
                 "  warnUnrunnableOverrides(impl->override, impl->algos, impl->transports, impl->ctx->rank);\n", "")],
         targets=["tpcomm_unit_host_comm"],
         tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "BadInput.ForcedAlgorithmThatCannotRunIsReported")]),
    # 12: the doctor does not report TPCOMM_DEBUG=garbage.
    dict(name="doctor_debug_unreported", item=12,
         edits=[("src/common/params.cc",
                 "  if (id == ParamId::kDebug || id == ParamId::kDebugSubsys) return logConfigProblem(id == ParamId::kDebug, p.value);\n",
                 "")],
         targets=["tpcomm-doctor"], tests=[("ctest", "^doctor_bad_params$")]),
    # 12: a config whose q|k|v width overflows int is accepted.
    dict(name="qwen_qkv_int_overflow", item=12,
         edits=[("examples/qwen_tp/config.cc", "  if (qkvRows > kIntMax)\n", "  if (false)\n")],
         targets=["qwen_config_test"],
         tests=[("gtest", "examples/qwen_tp/tests/qwen_config_test", "QwenConfig.HeadProductsThatOverflowIntAreRejected")]),
]


def gpu_mutants():
    """The GPU table in the CPU table's form."""
    return [dict(name=m[0], item=m[1], edits=[(m[2], m[3], m[4])], targets=["tpcomm_gpu_tests"],
                 tests=[("gtest", "tests/gpu/tpcomm_gpu_tests", m[5]) + ((m[6],) if len(m) > 6 else ())])
            for m in MUTANTS]


def sh(cmd, timeout, log, cwd=ROOT):
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = 124
    log.write("$ %s\n(rc %d, %.0f s)\n" % (" ".join(cmd), rc, time.time() - t0))
    log.flush()
    return rc, out


def summary(out):
    keep = ("[  PASSED  ]", "[  FAILED  ]", "tests passed", "***Timeout", "***Failed", "Exception:", "passed,")
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # gtest colours under mpiexec
    lines = [l.strip() for l in out.splitlines() if any(k in l for k in keep)]
    return "; ".join(lines[:4])[:300].replace("|", "/")


def clip(out):
    """The first 6000 and the last 14000 characters of a long output (first failures and summary)."""
    return out if len(out) <= 20000 else out[:6000] + "\n[... %d characters left out ...]\n" % (len(out) - 20000) + out[-14000:]


def describe(tests):
    return " + ".join("ctest -R '%s'" % t[1] if t[0] == "ctest" else "%s --gtest_filter=%s" % (os.path.basename(t[1]), t[2])
                      for t in tests)


def build(build_dir, targets, log, jobs):
    cmd = ["ninja", "-C", build_dir] + (["-j", str(jobs)] if jobs else []) + list(targets)
    return sh(cmd, 3600, log)


def run_tests(build_dir, tests, log):
    """(failed, detail, empty): failed when any test failed (rc != 0); empty when a regex or
    filter matched no test (neither a catch nor a pass: the mutant's test list is out of date)."""
    failed, empty, details = False, False, []
    for t in tests:
        if t[0] == "ctest":
            rc, out = sh(["ctest", "-R", t[1], "--output-on-failure"], 1800, log, cwd=build_dir)
            empty |= "No tests were found" in out
        else:
            exe = os.path.join(build_dir, t[1])
            wrapper = list(t[3]) if len(t) > 3 else []  # e.g. compute-sanitizer --tool synccheck
            rc, out = sh(wrapper + [exe, "--gtest_filter=" + t[2]], 1800, log, cwd=os.path.dirname(exe))
            empty |= "[==========] 0 tests" in out
        log.write(clip(out) + "\n")
        failed |= rc != 0
        details.append("%s rc %d%s" % (os.path.basename(t[1]), rc, (": " + summary(out)) if summary(out) else ""))
    return failed, "; ".join(details), empty


def apply_mutant(m):
    """Edits the files; returns {path: original text}, or raises ValueError when a fix's text is
    not in its file exactly once (nothing is left edited then)."""
    originals, texts = {}, {}
    for path, fixed, broken in m["edits"]:
        full = os.path.join(ROOT, path)
        if full not in texts:
            texts[full] = originals[full] = open(full).read()
        if texts[full].count(fixed) != 1:
            raise ValueError("the fix's text is in %s %d times, not once: mutant out of date" % (path, texts[full].count(fixed)))
        texts[full] = texts[full].replace(fixed, broken)
    return originals, texts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cpu", action="store_true", help="the CPU mutants (default: the GPU ones)")
    ap.add_argument("--only", default="")
    ap.add_argument("--log", default="")
    ap.add_argument("--jobs", type=int, default=0, help="ninja -j (default: ninja's)")
    ap.add_argument("--check", action="store_true", help="only check that every fix text is there once")
    a = ap.parse_args()
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
                      TPCOMM_MULTICAST="0")
    a.build = os.path.abspath(a.build)
    only = set(filter(None, a.only.split(",")))
    table = CPU_MUTANTS if a.cpu else gpu_mutants()
    chosen = [m for m in table if not only or m["name"] in only]
    if only - {m["name"] for m in chosen}:
        print("unknown mutant(s): %s" % ", ".join(sorted(only - {m["name"] for m in chosen})))
        return 2
    if a.check:
        bad = 0
        for m in chosen:
            try:
                apply_mutant(m)
                print("ok   %s" % m["name"])
            except ValueError as e:
                print("BAD  %s: %s" % (m["name"], e))
                bad += 1
        return 1 if bad else 0
    log = open(a.log or os.devnull, "w")
    commit = os.environ.get("COMMIT", "")
    if not commit:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        commit = r.stdout.strip() if r.returncode == 0 else "unknown"
    header = "# commit %s; date %s; command: %s" % (
        commit, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), " ".join(sys.argv))
    print(header, flush=True)
    log.write(header + "\n")
    rows, bad = [], 0
    for m in chosen:
        t0 = time.time()
        try:
            originals, texts = apply_mutant(m)
        except ValueError as e:
            rows.append((m["name"], m["item"], describe(m["tests"]), "n/a", str(e)))
            bad += 1
            continue
        log.write("## mutant %s (item %s)\n" % (m["name"], m["item"]))
        try:
            for full, text in texts.items():
                open(full, "w").write(text)
            rc, out = build(a.build, m["targets"], log, a.jobs)
            if rc != 0:
                log.write(out[-5000:] + "\n")
                rows.append((m["name"], m["item"], describe(m["tests"]), "build failed",
                             out.strip().splitlines()[-1][:200] if out.strip() else ""))
                bad += 1
                continue
            failed, detail, empty = run_tests(a.build, m["tests"], log)
            verdict = "no test matched" if empty else "FAILED (caught)" if failed else "passed (NOT caught)"
            rows.append((m["name"], m["item"], describe(m["tests"]), verdict, detail))
            bad += empty or not failed
        finally:
            for full, text in originals.items():
                open(full, "w").write(text)
        print("%s: %s (%.0f s)" % (m["name"], rows[-1][3], time.time() - t0), flush=True)
    # The same tests unmutated: they must pass.
    targets = sorted({t for m in chosen for t in m["targets"]})
    if any(not m["targets"] for m in chosen):
        targets = []
    tests = []
    for m in chosen:
        for t in m["tests"]:
            if t not in tests:
                tests.append(t)
    rc, out = build(a.build, targets, log, a.jobs)
    if rc == 0:
        failed, detail, empty = run_tests(a.build, tests, log)
        failed |= empty
    else:
        failed, detail = True, "build failed: " + (out.strip().splitlines()[-1][:200] if out.strip() else "")
    rows.append(("(none: the fixed code)", "-", describe(tests), "FAILED" if failed else "passed", detail))
    bad += failed
    print("| mutant | item | tests | result | detail |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | `%s` | %s | %s |" % r)
        log.write("| %s | %s | `%s` | %s | %s |\n" % r)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
