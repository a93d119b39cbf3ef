// How ranks meet. A Bootstrap is a tiny out-of-band channel used only at set-up time (handle and
// topology exchange) and for host-side barriers; data never goes through it.
#pragma once

#include <memory>

#include "tpcomm/status.h"

namespace tpcomm {

/// Abstract rendezvous between the ranks of one communicator.
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  /// This rank's index, 0..size()-1.
  virtual int rank() const = 0;
  /// Number of ranks.
  virtual int size() const = 0;
  /// Gathers `bytesPerRank` bytes from every rank into `all` (size() * bytesPerRank bytes,
  /// rank order). Collective: every rank must call it. Bounded by TPCOMM_TIMEOUT_MS where the
  /// underlying channel allows.
  virtual Status allGather(const void* mine, void* all, size_t bytesPerRank) = 0;
  /// Blocks until every rank has entered. Collective.
  virtual Status barrier() = 0;
};

/// Shared state for ranks that are threads of one process. Create one per group and hand it to
/// every thread's makeThreadBootstrap().
class ThreadGroup {
 public:
  /// A rendezvous for `size` thread ranks (1..65536; null otherwise).
  static std::shared_ptr<ThreadGroup> create(int size);
  virtual ~ThreadGroup() = default;
  /// Number of ranks in the group.
  virtual int size() const = 0;
};

/// Bootstrap for rank `rank` of a ThreadGroup (ranks are threads of this process, as in Gloo's
/// tests or a llama.cpp-style engine). Returns kInvalidArgument for a null group or a rank out
/// of range.
Status makeThreadBootstrap(std::shared_ptr<ThreadGroup> group, int rank, std::unique_ptr<Bootstrap>* out);

}  // namespace tpcomm
