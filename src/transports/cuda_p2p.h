// cuda_p2p: peer-mapped device buffers and signal flags between the GPU ranks of one node.
// (Placeholder interface; filled in by the GPU P2P work.)
#pragma once

#include <memory>

#include "tpcomm/status.h"

namespace tpcomm {

struct CommContext;

class CudaP2pTransport {
 public:
  virtual ~CudaP2pTransport() = default;
  /// Collective. kNotSupported when some pair lacks verified P2P.
  static Status create(CommContext& ctx, std::unique_ptr<CudaP2pTransport>* out);
};

}  // namespace tpcomm
