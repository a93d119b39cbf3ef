// Probing the local rank and the links between ranks. Each rank describes itself and its own row
// of the link matrix; rows are gathered so every rank holds the same, symmetric matrix (the
// selector must choose identically everywhere).
#pragma once

#include <cstdint>
#include <vector>

#include "topology/topology.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm {

/// Fixed-size description of one rank, exchanged through the bootstrap.
struct RankRecord {
  int32_t cudaDevice;
  int32_t ccMajor, ccMinor, smCount;
  int32_t numaNode;
  int32_t processId;
  int32_t multicastSupported;
  uint64_t hostHash;
  char name[96];
  char busId[32];
  char uuid[48];
};

/// One entry of a rank's link row.
struct LinkRecord {
  int32_t kind;  // LinkKind
  int32_t nvlinks;
  int32_t p2pVerified;
  int32_t atomics;
  char why[96];
};

/// Describes this process's rank driving `device` (-1: host rank).
Status probeLocalRank(int device, RankRecord* out);
/// Fills `row[peer]` for every rank from `records` (row[me] is kSelf).
Status probeLinkRow(int me, const std::vector<RankRecord>& records, std::vector<LinkRecord>* row);
/// Full collective probe: gathers records and rows, symmetrizes, sets multicast gating.
Status probeTopology(Bootstrap& bootstrap, int device, Topology* out);

}  // namespace tpcomm
