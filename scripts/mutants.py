"""The mutants of scripts/mutation_check.py: each puts one fixed defect back (a textual edit of
the fix) and names the tests that must then fail. GPU mutants (MUTANTS) run on a GPU machine;
CPU mutants (CPU_MUTANTS) anywhere the CPU tests run; those marked ci=True are the handful CI
runs (--ci). Add a row for every fixed defect whose test can fail on the CPU."""

# name, item (the defect's number in docs/reliability.md, "The defects, by number"), file, text
# of the fix, the defect put back, tests that must fail[, a command the test binary runs under
# (e.g. compute-sanitizer)].
MUTANTS = [
    ("poison_ignored", 13, "src/algos/p2p/p2p_common.cuh",
     "  *deadline = globalTimerNs() + p.timeoutNs;\n  return poison == 0;",
     "  *deadline = globalTimerNs() + p.timeoutNs;\n  return true;",
     "All/FaultMatrix.LateBeyondBound/*"),
    ("streams_unordered", 14, "src/collectives/call_path.cc",
     "  if (!impl.haveLastStream || a.stream == impl.lastStream) {",
     "  if (true) {",
     "All/FaultEach.TwoStreams/*"),
    # Survives where ranks share a GPU (1x H200): bring_up.cc turns PDL off there, so the
    # all-reduce starts only after the spin kernel ends and both clocks agree; two GPUs catch it.
    ("pdl_wait_counted", 16, "src/algos/p2p/oneshot_p2p.cu",
     "  dev::pdlWait();  // inputs and the epoch may come from the previous kernel\n"
     "  uint64_t deadline;\n  if (!dev::p2pBegin(p, &deadline)) return;",
     "  uint64_t deadline;\n  const uint64_t startedNs = dev::globalTimerNs();\n  dev::pdlWait();\n"
     "  if (!dev::p2pBegin(p, &deadline)) return;\n  deadline = startedNs + p.timeoutNs;",
     "P2p/GpuFault.PdlWaitIsNotCountedAgainstTheTimeout/1"),
    # Lamport's own -0.0 unscrubbed alone is covered by the zero rule of every reduction (the
    # mutant survives on 1x H200: bench/results/h200x1.md, "Tests"); defect 17 needs both gone.
    ("lamport_own_zero_unscrubbed", 17, "src/algos/p2p/lamport_p2p.cu",
     "        in[r] = dev::lamportScrub<T>(loadUserPack<T, kVec>(p.send, i, p.count));\n        continue;",
     "        in[r] = loadUserPack<T, kVec>(p.send, i, p.count);\n        continue;",
     "All/SpecialValues.*"),
    ("zero_rule_removed", 17, "src/algos/common/device_common.cuh",
     "    for (int i = 0; i < kElems; ++i) f[i] = __fadd_rn(f[i], 0.0f);\n  }",
     "    for (int i = 0; i < kElems; ++i) f[i] = f[i];\n  }",
     "All/SpecialValues.*"),
    # The create-time residency check removed (caught on 1x H200: bench/results/h200x1.md, "Tests").
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
    # Defect 34.5 on GPU ranks: the one-rank kernel copies -0.0 through.
    ("gpu_one_rank_keeps_negative_zero", "34.5", "src/algos/local/copy_local.cu",
     "__fadd_rn(dev::Elem<T>::toFloat(in[i]), 0.0f)", "dev::Elem<T>::toFloat(in[i])",
     "All/OneRankZeros.*"),
    ("gpu_signature_unchecked", 7, "src/algos/p2p/p2p_common.cuh",
     "  if (!p.signature) return true;\n  __shared__ int bad;",
     "  return true;\n  __shared__ int bad;",
     "All/FaultEach.MismatchedCall/*"),
    # A staged_host kernel's expired wait tells only its own rank: the late rank's kernel never
    # sees the failure and its host reports kOk (the copy-engine mode's flags kernels still
    # publish theirs, so only the SM kernels' cases fail).
    ("staged_timeout_unpublished", 13, "src/algos/staged_host/staged_device.cuh",
     "  atomicCAS_system(p.poison, 0u, code);\n  __threadfence_system();\n  atomicCAS_system(p.errorWord, 0u, code);",
     "  __threadfence_system();\n  atomicCAS_system(p.errorWord, 0u, code);",
     "All/FaultMatrix.LateBeyondBound/staged*"),
    ("staged_signature_unchecked", 7, "src/algos/staged_host/staged_device.cuh",
     "  if (!p.signature) return true;\n  if (*reinterpret_cast<const volatile uint64_t*>(p.signatures + i)",
     "  return true;\n  if (*reinterpret_cast<const volatile uint64_t*>(p.signatures + i)",
     "All/FaultEach.MismatchedCall/staged*"),
]

# GPU mutants whose tests live in another binary, in the CPU table's form (run with the GPU ones).
# The decoder's "TP=2 tokens equal TP=1" bound (2 x TP=1's bf16 error + 2^-7 of the largest
# logit) against a sum that scales one rank's partial by 1.01 (every device sum: one-shot,
# two-shot, Lamport, the fused all-reduce + RMSNorm), and against one that drops it.
GPU_OTHER_MUTANTS = [
    dict(name="qwen_sum_scaled_1pct", item="34.weak", edits=[
        ("src/algos/common/device_common.cuh", "  if (Op == 0) return a + b;", "  if (Op == 0) return a + 1.01f * b;")],
        targets=["qwen_gpu_test"], tests=[("gtest", "examples/qwen_tp/tests/qwen_gpu_test", "QwenGpu.Tp2TokensEqualTp1")]),
    dict(name="qwen_sum_drops_peer", item="34.weak", edits=[
        ("src/algos/common/device_common.cuh", "  if (Op == 0) return a + b;", "  if (Op == 0) return a;")],
        targets=["qwen_gpu_test"], tests=[("gtest", "examples/qwen_tp/tests/qwen_gpu_test", "QwenGpu.Tp2TokensEqualTp1")]),
]


# CPU mutants: name, item (as above), edits [(file, text of the fix, the defect put back)], ninja
# targets to rebuild ([] = all), tests: ("ctest", REGEX) runs `ctest -R REGEX` in the build dir,
# ("gtest", EXECUTABLE relative to the build dir, FILTER) runs it with --gtest_filter. A mutant
# is caught when any of its tests fails; unmutated, all of them must pass.
CPU_MUTANTS = [
    # 1: a late rank passes the host_staged barrier its timed-out peer broke (the timed-out
    # arrival still counted), then uses the stale pointers.
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
    # 5: a timed-out MPI bootstrap frees its communicator with the collective still pending. It
    # survives the fault test's section 6 (a collective that never completes, its bootstraps
    # destroyed): MPI_Comm_free with an operation pending is legal (the operation completes
    # normally, the communicator goes when nothing refers to it), and Open MPI 4.1.4 finalizes
    # cleanly after it; keeping the communicator is a precaution for libraries that do not.
    dict(name="mpi_comm_freed_with_pending", item=5,
         edits=[("src/bootstrap/mpi_bootstrap.cc",
                 "        retain(pending_);\n        pending_ = nullptr;\n        return;\n      }",
                 "        retain(pending_);\n        pending_ = nullptr;\n      }")],
         targets=["tpcomm_mpi_bootstrap_fault"], tests=[("ctest", "^tpcomm_mpi_bootstrap_fault_np[24]$")]),
    # 5: the timed-out collective's buffers freed while MPI may still complete it, and with no op
    # pending the destructor frees the communicator too. The fault test's section 5 gives rank 0 a
    # bound shorter than a 64 MB allGather's transfer: rank 0 times out inside the collective and
    # destroys its bootstrap, and MPI completes the exchange from rank 0's buffers afterwards. At 2
    # ranks the freed (unmapped) buffers crash rank 0; at 4 ranks Open MPI 4.1.4 moves the rest
    # without touching them, so the np2 run is the one that catches it.
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
    # 6: create does not clean up (tpcomm-doctor --clean still does).
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
    # 9: the socket bootstrap's deadline (timeout + slack) in int: overflows near INT32_MAX ms.
    dict(name="socket_deadline_int", item=9,
         edits=[("src/bootstrap/socket_bootstrap.cc", "return Deadline(static_cast<int64_t>(timeoutMs()) + extraMs);",
                 "return Deadline(timeoutMs() + extraMs);")],
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
    # 10: the host's call counter never advances: a timeout cannot say whether the late rank's
    # host had made the call.
    dict(name="host_calls_uncounted", item=10,
         edits=[("src/collectives/call_path.cc", "  if (c.hostStaged) a.callNumber = c.hostStaged->beginCall();\n", "")],
         targets=["tpcomm_fault_staged_late_rank", "tpcomm_unit_timeout"],
         tests=[("ctest", "^tpcomm_fault_staged_late_rank$"), ("ctest", "^tpcomm_unit_timeout$")]),
    # 10: a kernel's arrival word ignored: a rank whose kernel had not started reads as one that
    # was running.
    dict(name="lateness_arrival_ignored", item=10,
         edits=[("src/common/async_error.h", "         : peerArrival != arrivalStarted(call) ?", "         : false ?")],
         targets=["tpcomm_unit_core"], tests=[("gtest", "tests/unit/tpcomm_unit_core", "AsyncError.*")]),
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
                 "      return logConfigProblem(id == ParamId::kDebug, p.value);\n    case ParamId::kCompression:",
                 "      return \"\";\n    case ParamId::kCompression:")],
         targets=["tpcomm-doctor"], tests=[("ctest", "^doctor_bad_params$")]),
    # 12: a config whose q|k|v width overflows int is accepted.
    dict(name="qwen_qkv_int_overflow", item=12,
         edits=[("examples/qwen_tp/config.cc", "  if (qkvRows > kIntMax)\n", "  if (false)\n")],
         targets=["qwen_config_test"],
         tests=[("gtest", "examples/qwen_tp/tests/qwen_config_test", "QwenConfig.HeadProductsThatOverflowIntAreRejected")]),
    # --- the fault campaign's defects (34.N): create clean-up, C API sizes, buffer bounds, the
    # one-rank zero rule, MPI arrival notes, the socket bootstrap, one caller at a time, bounds --
    # Marked ci=True: the handful --ci runs (a reduction, bounds, error paths; each rebuilds one
    # file of libtpcomm and runs one test binary).
    # 34.1: rank 0 returns from the failed exchange that shares the segment's name without
    # unlinking it: /dev/shm/tpcomm-<pid>-* stays.
    dict(name="shm_left_on_failed_create", item="34.1", ci=True,
         edits=[("src/transports/host_staged.cc",
                 "    if (ctx.rank == 0 && mine.ok && !t->sameProcess_) shm_unlink(mine.name);\n", "")],
         targets=["tpcomm_fault_create_cleanup"], tests=[("ctest", "^tpcomm_fault_create_cleanup$")]),
    # 34.3: the C config's pointer fields copied whatever part of them `size` covers.
    dict(name="capi_config_half_pointer", item="34.3", ci=True,
         edits=[("src/capi/tpcomm_c.cc", "    if (bytes <= size && offset <= size - bytes) std::memcpy(field, from + offset, bytes);",
                 "    if (offset < size) std::memcpy(field, from + offset, bytes < size - offset ? bytes : size - offset);")],
         targets=["capi_config_test"], tests=[("ctest", "^capi_config_test$")]),
    # 34.4: a buffer whose end wraps past the top of the address space accepted.
    dict(name="overlap_wraps", item="34.4", ci=True,
         edits=[("src/collectives/call_checks.cc", "  if (!fitsAddressSpace(send, sendBytes))", "  if (false)"),
                ("src/collectives/call_checks.cc", "  if (!fitsAddressSpace(recv, recvBytes))", "  if (false)"),
                ("src/collectives/call_checks.cc", "  const bool apart = s <= r ? r - s >= sendBytes : s - r >= recvBytes;",
                 "  const bool apart = s + sendBytes <= r || r + recvBytes <= s;")],
         targets=["tpcomm_unit_host_comm"],
         tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "BadInput.BadCallsAreRejectedAndTheCommunicatorStaysUsable")]),
    # 34.5: a one-rank all-reduce copies its input: -0.0 stays -0.0.
    dict(name="one_rank_keeps_negative_zero", item="34.5", ci=True,
         edits=[("src/algos/local/copy_local.cc", "        hostReduce(a.recv, &a.send, 1, a.count, a.dtype, a.op);",
                 "        std::memmove(a.recv, a.send, a.bytes());")],
         targets=["tpcomm_unit_host_comm"],
         tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "Determinism.OneRank*")]),
    # A reduction broken: the host max is a min.
    dict(name="host_max_is_min", item="34 (mutation in CI)", ci=True,
         edits=[("src/algos/host/host_reduce.cc", "    case ReduceOp::kMax: return std::fmax(a, b);",
                 "    case ReduceOp::kMax: return std::fmin(a, b);")],
         targets=["tpcomm_unit_host_comm"], tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "HostCollectives*")]),
    # 34.6: MPI starts the collective without every peer's note: a missing rank leaves it
    # pending, an allGather meets a barrier (Open MPI aborts the job).
    dict(name="mpi_collective_before_notes", item="34.6",
         edits=[("src/bootstrap/mpi_bootstrap.cc", "    if (!missing.empty() || !elsewhere.empty()) {",
                 "    if (false) {")],
         targets=["tpcomm_mpi_bootstrap_fault"], tests=[("ctest", "^tpcomm_mpi_bootstrap_fault_np2$")]),
    # 34.7: a rank takes rank 0's verdict without checking its proof (a squatter is believed).
    dict(name="socket_verdict_unproven", item="34.7",
         edits=[("src/bootstrap/socket_rendezvous.cc",
                 "  const bool proven = v.magic == kWireMagic && equalInConstantTime(want, v.proof, kSha256Bytes);",
                 "  const bool proven = v.magic == kWireMagic;")],
         targets=["tpcomm_fault_socket_bootstrap"],
         tests=[("gtest", "tests/fault/tpcomm_fault_socket_bootstrap", "*Squatter*")]),
    # 34.7: pending connections unbounded (a flood exhausts rank 0's descriptors).
    dict(name="socket_pending_unbounded", item="34.7",
         edits=[("src/bootstrap/socket_rendezvous.cc", "    if (waiting.size() >= maxWaiting) dropOldest();\n", "")],
         targets=["tpcomm_fault_socket_bootstrap"],
         tests=[("gtest", "tests/fault/tpcomm_fault_socket_bootstrap", "*Flood*")]),
    # 34.8: a second caller let in.
    dict(name="second_caller_let_in", item="34.8", ci=True,
         edits=[("src/collectives/communicator.cc", "    if (impl->inCall.exchange(true, std::memory_order_acquire)) {",
                 "    if (impl->inCall.exchange(true, std::memory_order_acquire) && false) {")],
         targets=["tpcomm_unit_host_comm"], tests=[("gtest", "tests/unit/tpcomm_unit_host_comm", "All/ConcurrentCallers.*")]),
    # 34.9: a rank waits for rank 0's reply a second past the bound (a fixed one-second grace).
    dict(name="socket_reply_grace", item="34.9",
         edits=[("src/bootstrap/socket_bootstrap.cc", "deadline(kReplySlackMs), \"rank 0's reply\"",
                 "deadline(1000), \"rank 0's reply\""),
                ("src/bootstrap/socket_bootstrap.cc", "    Status s = recvAll(fd, &in, sizeof(in), dl, \"rank 0's arrival\", 0);",
                 "    Status s = recvAll(fd, &in, sizeof(in), deadline(1000), \"rank 0's arrival\", 0);")],
         targets=["tpcomm_unit_timeout_load"], tests=[("ctest", "^tpcomm_unit_timeout_load$")]),
    # 34.10: create's bootstrap exchanges bounded by TPCOMM_TIMEOUT_MS, not Config::timeoutMs.
    dict(name="config_timeout_not_in_bootstrap", item="34.10",
         edits=[("src/collectives/communicator.cc", "  ScopedBootstrapTimeout bound(impl->setupTimeoutMs, impl->setupTimeoutSource);",
                 "  ScopedBootstrapTimeout bound(0, impl->setupTimeoutSource);")],
         targets=["tpcomm_unit_timeout"],
         tests=[("gtest", "tests/unit/tpcomm_unit_timeout", "Timeout.ConfigWinsOverTheEnvironmentInCreateThreads")]),
]
