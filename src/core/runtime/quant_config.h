// braidQuantConfig_t as the runtime reads it: one validation (and one message per bad field) for
// the quantized collectives and the local codec calls (api_quantize.cc).
#pragma once

#include <string>

#include "braid/braid.h"
#include "core/base/status.h"
#include "quant/block_format.h"

namespace braid {

// The largest block a quantized call may name: WireHeader::codec carries it in 24 bits.
inline constexpr int kMaxQuantBlock = 1 << 20;

// InvalidArgument naming the bad field (prefixed with `name`), else the block format.
Status ParseQuantConfig(const braidQuantConfig_t& q, const char* name, quant::BlockFormat* out);

}  // namespace braid
