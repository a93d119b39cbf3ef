// topo_cache.h: the probe result, cached per user so that Communicator::create pays for the
// child process and the P2P checks once per boot configuration, not per start. The file is the
// MachineProbe JSON in $XDG_CACHE_HOME/tpcomm/ (or ~/.cache/tpcomm/), named by a hash of the
// NVIDIA driver version and the kernel command line; a hit also needs every requested GPU to be
// in it with the same UUID at the same bus id. A changed driver, boot parameters (iommu=pt) or
// GPU set re-probes; TPCOMM_TOPO_CACHE=0 re-probes always (and refreshes the file). Only
// definitive results are written (no hang, no CUDA error: MachineProbe::cacheable()).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "topology/machine_probe.h"

namespace tpcomm {

/// A GPU the caller needs from the cache: uuid + bus id.
struct GpuKey {
  std::string uuid, busId;
};

/// $XDG_CACHE_HOME/tpcomm or $HOME/.cache/tpcomm ("" when neither is set).
std::string topoCacheDir();
/// <dir>/topo-<16 hex>.json for this driver + cmdline.
std::string topoCachePath(const std::string& dir, const std::string& driverVersion, int cudaDriverApi,
                          const std::string& cmdline);

/// Largest cache file read (a probe of 64 GPUs is about 1 MB); a bigger one is a miss.
constexpr size_t kTopoCacheMaxBytes = 4u << 20;

/// Reads a cache file: regular files only (opened non-blocking, so a FIFO never hangs), at
/// most kTopoCacheMaxBytes. kNotSupported: no file; kInvalidArgument: unusable (why says so).
Status readCacheFile(const std::string& path, std::string* text, std::string* why);

/// kOk on a hit (out filled); kNotSupported on a miss, with `why` ("no file", "driver changed",
/// "GPU 0000:18:00.0 not in the cache", ...). A malformed, oversized or non-regular file is a
/// miss with a warning (never an exception or an abort): the probe runs and rewrites it.
Status loadTopoCache(const std::string& path, const std::string& driverVersion, int cudaDriverApi,
                     const std::string& cmdline, const std::vector<GpuKey>& want, MachineProbe* out,
                     std::string* why);
/// Writes atomically (temp file + rename), creating the directory. kSystemError on failure.
Status storeTopoCache(const std::string& path, const MachineProbe& m);

/// Writes `text` to `path` atomically: the directory is created (mode 0700), the text goes to
/// a new private temp file beside it (mode 0600), which is renamed over `path`, so a reader
/// sees the old file or the new one, never half of one. kSystemError naming the step on failure.
Status writeFileAtomically(const std::string& path, const std::string& text);

}  // namespace tpcomm
