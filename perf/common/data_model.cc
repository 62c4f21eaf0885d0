#include "common/data_model.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace braid_perf {

const std::vector<OpInfo>& AllOps() {
  static const std::vector<OpInfo> ops = {
      {"sum", OpKind::kSum}, {"prod", OpKind::kProd}, {"max", OpKind::kMax},
      {"min", OpKind::kMin}, {"avg", OpKind::kAvg},   {"mulsum", OpKind::kMulSum},
  };
  return ops;
}

const OpInfo* FindOp(const char* name) {
  for (const OpInfo& o : AllOps())
    if (std::strcmp(o.name, name) == 0) return &o;
  return nullptr;
}

namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Lcm(uint64_t a, uint64_t b) {
  return a / std::gcd(a, b) * b;
}

template <typename U>
void FillTable(U* out, size_t count, const std::vector<uint64_t>& table, uint64_t start) {
  const size_t period = table.size();
  size_t k = start % period;
  for (size_t i = 0; i < count; ++i) {
    out[i] = static_cast<U>(table[k]);
    if (++k == period) k = 0;
  }
}

template <typename U>
uint64_t CheckTable(const U* got, size_t count, const std::vector<uint64_t>& table, uint64_t start,
                    const TypeInfo& type, uint64_t tol) {
  const size_t period = table.size();
  size_t k = start % period;
  uint64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    U want = static_cast<U>(table[k]);
    if (got[i] != want && (tol == 0 || UlpDistance(type, got[i], want) > tol)) ++wrong;
    if (++k == period) k = 0;
  }
  return wrong;
}

}  // namespace

DataModel::DataModel(const TypeInfo& type, OpKind op, int nranks, bool quantized)
    : type_(type), op_(op), nranks_(nranks), copy_(op == OpKind::kNone), quantized_(quantized) {
  if (copy_ || quantized_) return;
  const int64_t n = nranks;
  switch (op) {
    case OpKind::kSum:
    case OpKind::kAvg:
    case OpKind::kMulSum: {
      int64_t limit = op == OpKind::kMulSum ? type.exact_max / kMulSumScalar : type.exact_max;
      m_ = std::min<int64_t>(limit / n, 100);
      if (m_ >= 1) {
        range_ = type.is_signed ? 2 * m_ + 1 : m_ + 1;
        offset_ = type.is_signed ? m_ : 0;
        period_ = static_cast<uint64_t>(range_);
      } else {
        sparse_ = true;
        period_ = static_cast<uint64_t>(n);
      }
      break;
    }
    case OpKind::kMax:
    case OpKind::kMin: {
      int64_t h = std::min<int64_t>(type.exact_max, type.is_signed ? 50 : 100);
      range_ = type.is_signed ? 2 * h + 1 : h + 1;
      offset_ = type.is_signed ? h : 0;
      period_ = static_cast<uint64_t>(range_);
      break;
    }
    case OpKind::kProd: {
      prod_t_ = static_cast<int>(std::min<int64_t>(n, type.max_pow2));
      rotate_ = n <= 64;  // keeps the period (and the table) small
      period_ = Lcm(static_cast<uint64_t>(prod_t_ + 1), 5);
      if (rotate_) period_ = Lcm(period_, static_cast<uint64_t>(n));
      break;
    }
    case OpKind::kNone:
      break;
  }
  if (op == OpKind::kAvg && type.is_float) tolerance_ulps_ = 2;

  expected_.resize(period_);
  for (uint64_t i = 0; i < period_; ++i) {
    int64_t acc = input(0, i) * (op == OpKind::kMulSum ? kMulSumScalar : 1);
    for (int r = 1; r < nranks; ++r) {
      int64_t v = input(r, i);
      switch (op) {
        case OpKind::kSum:
        case OpKind::kAvg:
          acc += v;
          break;
        case OpKind::kMulSum:
          acc += v * kMulSumScalar;
          break;
        case OpKind::kProd:
          acc *= v;
          break;
        case OpKind::kMax:
          acc = std::max(acc, v);
          break;
        case OpKind::kMin:
          acc = std::min(acc, v);
          break;
        case OpKind::kNone:
          break;
      }
    }
    if (op == OpKind::kAvg) {
      // Integers: C division (truncation toward zero), as braid.h specifies.
      expected_[i] = type.is_float ? EncodeReal(type, static_cast<double>(acc) / nranks)
                                   : EncodeInt(type, acc / nranks);
    } else {
      expected_[i] = EncodeInt(type, acc);
    }
  }
}

int64_t DataModel::input(int rank, uint64_t i) const {
  const uint64_t r = static_cast<uint64_t>(rank);
  switch (op_) {
    case OpKind::kSum:
    case OpKind::kAvg:
    case OpKind::kMulSum:
    case OpKind::kMax:
    case OpKind::kMin:
      if (sparse_) return (i + r) % static_cast<uint64_t>(nranks_) == 0 ? 1 : 0;
      return static_cast<int64_t>((7 * i + 13 * r) % static_cast<uint64_t>(range_)) - offset_;
    case OpKind::kProd: {
      uint64_t t = i % static_cast<uint64_t>(prod_t_ + 1);
      uint64_t slot = rotate_ ? (i + r) % static_cast<uint64_t>(nranks_) : r;
      int64_t v = slot < t ? 2 : 1;
      if (type_.is_signed && (i + 2 * r) % 5 == 0) v = -v;
      return v;
    }
    case OpKind::kNone:
      break;
  }
  return 0;
}

uint64_t DataModel::copyBits(int rank, uint64_t i, uint64_t seed) const {
  uint64_t bits = SplitMix(i ^ (static_cast<uint64_t>(rank) << 40) ^ (seed << 56));
  if (type_.size < 8) bits &= (1ull << (8 * type_.size)) - 1;
  return MakeFinite(type_, bits);
}

double DataModel::quantValue(int rank, uint64_t i, uint64_t seed) const {
  const uint64_t h =
      SplitMix(i ^ (static_cast<uint64_t>(rank) << 40) ^ (seed << 56) ^ 0x51a7c0dec0ffee00ull);
  const int s =
      static_cast<int>((h & 0xff) + ((h >> 8) & 0xff) + ((h >> 16) & 0xff) + ((h >> 24) & 0xff)) -
      510;
  return DecodeReal(type_, EncodeReal(type_, s / 128.0));
}

void DataModel::error(const void* buf, const std::vector<Block>& blocks, uint64_t seed,
                      double* err2, double* ref2) const {
  const auto* base = static_cast<const unsigned char*>(buf);
  double e2 = 0, r2 = 0;
  for (const Block& b : blocks) {
    const unsigned char* p = base + b.dst * type_.size;
    for (size_t i = 0; i < b.count; ++i) {
      double want = 0;
      if (copy_) {
        want = quantValue(b.src_rank, b.src_index + i, seed);
      } else {
        for (int r = 0; r < nranks_; ++r) want += quantValue(r, b.src_index + i, seed);
        if (op_ == OpKind::kAvg) want /= nranks_;
      }
      uint64_t bits = 0;
      std::memcpy(&bits, p + i * type_.size, type_.size);
      const double d = DecodeReal(type_, bits) - want;
      e2 += d * d;
      r2 += want * want;
    }
  }
  *err2 += e2;
  *ref2 += r2;
}

void DataModel::fill(void* buf, int rank, size_t first, size_t count, uint64_t seed) const {
  if (count == 0) return;
  if (quantized_) {
    auto* p = static_cast<unsigned char*>(buf);
    for (size_t i = 0; i < count; ++i) {
      uint64_t b = EncodeReal(type_, quantValue(rank, first + i, seed));
      std::memcpy(p + i * type_.size, &b, type_.size);  // little endian
    }
    return;
  }
  if (copy_) {
    auto* p = static_cast<unsigned char*>(buf);
    for (size_t i = 0; i < count; ++i) {
      uint64_t b = copyBits(rank, first + i, seed);
      std::memcpy(p + i * type_.size, &b, type_.size);  // little endian
    }
    return;
  }
  // One period of this rank's input, then a strided copy of it.
  std::vector<uint64_t> table(period_);
  for (uint64_t i = 0; i < period_; ++i) table[i] = EncodeInt(type_, input(rank, i));
  const uint64_t start = first + seed * 3;  // the seed shifts the pattern between checks
  switch (type_.size) {
    case 1:
      FillTable(static_cast<uint8_t*>(buf), count, table, start);
      break;
    case 2:
      FillTable(static_cast<uint16_t*>(buf), count, table, start);
      break;
    case 4:
      FillTable(static_cast<uint32_t*>(buf), count, table, start);
      break;
    default:
      FillTable(static_cast<uint64_t*>(buf), count, table, start);
      break;
  }
}

uint64_t DataModel::verify(const void* buf, const std::vector<Block>& blocks, uint64_t seed) const {
  uint64_t wrong = 0;
  const auto* base = static_cast<const unsigned char*>(buf);
  for (const Block& b : blocks) {
    const unsigned char* p = base + b.dst * type_.size;
    if (copy_) {
      for (size_t i = 0; i < b.count; ++i) {
        uint64_t got = 0;
        std::memcpy(&got, p + i * type_.size, type_.size);
        wrong += got != copyBits(b.src_rank, b.src_index + i, seed);
      }
      continue;
    }
    const uint64_t start = b.src_index + seed * 3;
    switch (type_.size) {
      case 1:
        wrong += CheckTable(reinterpret_cast<const uint8_t*>(p), b.count, expected_, start, type_,
                            tolerance_ulps_);
        break;
      case 2:
        wrong += CheckTable(reinterpret_cast<const uint16_t*>(p), b.count, expected_, start, type_,
                            tolerance_ulps_);
        break;
      case 4:
        wrong += CheckTable(reinterpret_cast<const uint32_t*>(p), b.count, expected_, start, type_,
                            tolerance_ulps_);
        break;
      default:
        wrong += CheckTable(reinterpret_cast<const uint64_t*>(p), b.count, expected_, start, type_,
                            tolerance_ulps_);
        break;
    }
  }
  return wrong;
}

}  // namespace braid_perf
