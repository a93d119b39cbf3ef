// How many blocks of tpcomm's kernels one SM holds at once. Every kernel that waits for a peer
// (or, in staged_host, for its own other role) spins, so all blocks of a call must be resident
// together: the kernels' preload records each one's occupancy here and Communicator::create
// checks its grids against the smallest (bring_up.cc).
#pragma once

namespace tpcomm {

/// Records that a kernel of `threads` threads per block fits `blocks` to an SM (dev::preload).
void noteResidentBlocksPerSm(int blocks, int threads);
/// The smallest number of 512-thread blocks per SM over every kernel recorded so far, in this
/// process; 0 when none was recorded.
int residentBlocksPerSm();

}  // namespace tpcomm
