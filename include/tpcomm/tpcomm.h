// tpcomm: all-reduce for tensor-parallel LLM inference. Include this header and link
// tpcomm::tpcomm. See README.md for usage.
#pragma once

#include "tpcomm/bootstrap.h"
#include "tpcomm/communicator.h"
#include "tpcomm/rmsnorm.h"
#include "tpcomm/status.h"
#include "tpcomm/types.h"
#include "tpcomm/version.h"
