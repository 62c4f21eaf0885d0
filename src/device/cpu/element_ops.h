// The four reductions on one pair of values (sum and product wrapping for integers, IEEE 754-2019
// maximum/minimum for floats), written so a loop of them vectorises. Defined once, for the CPU
// and the GPU kernels, in device/element_math.h; the CPU kernels use them from braid::cpu.
#pragma once

#include "core/base/datatype.h"
#include "device/cpu/kernel_isa.h"
#include "device/element_math.h"

namespace braid::cpu {

using element::Combine;
using element::FloatBitsType;
using element::IeeeMaximum;
using element::IeeeMinimum;
using element::Multiply;

}  // namespace braid::cpu
