// Element types of the perf binaries: names, sizes, the range in which integers are exact, and
// small converters (so the harness needs only braid's public API, not its internals).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/braid.h"

namespace braid_perf {

struct TypeInfo {
  braidDataType_t type;
  const char* name;  // nccl-tests spelling: "float", "bfloat16", "f8e4m3" ...
  size_t size;       // bytes
  bool is_float;
  bool is_signed;
  // Every integer in [-exact_max, exact_max] (in [0, exact_max] when unsigned) is representable.
  int64_t exact_max;
  // 2^max_pow2 is representable (and, for signed types, -2^max_pow2). Capped at 30.
  int max_pow2;
};

// All twelve types in nccl-tests' "-d all" order.
const std::vector<TypeInfo>& AllTypes();
// nullptr for an unknown name.
const TypeInfo* FindType(const std::string& name);

// Encodes an integer / a real number as the type's bit pattern (little-endian value in the low
// `size` bytes). Floating types round to nearest even; f8e4m3 saturates to +-448.
uint64_t EncodeInt(const TypeInfo& t, int64_t v);
uint64_t EncodeReal(const TypeInfo& t, double v);

// The value of a float32, float16 or bfloat16 bit pattern (exact); other types: 0.
double DecodeReal(const TypeInfo& t, uint64_t bits);

// Distance in units in the last place between two floating-point bit patterns of type `t`
// (0 for identical values, +0 and -0 included).
uint64_t UlpDistance(const TypeInfo& t, uint64_t a, uint64_t b);

// Replaces a NaN/Inf bit pattern of a floating type by a finite one (raw random bits are used for
// copy collectives; a NaN would still compare bit-exactly, but keeps the data printable).
uint64_t MakeFinite(const TypeInfo& t, uint64_t bits);

}  // namespace braid_perf
