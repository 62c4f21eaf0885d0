#include "core/runtime/stream_flag_pool.h"

#include <map>
#include <memory>

namespace braid {

StreamFlagPool& StreamFlagPool::For(device::DeviceRuntime* runtime) {
  static std::mutex mu;
  static auto* pools = new std::map<device::DeviceRuntime*, std::unique_ptr<StreamFlagPool>>;
  std::lock_guard<std::mutex> lock(mu);
  auto& p = (*pools)[runtime];
  if (!p) p = std::make_unique<StreamFlagPool>(runtime);
  return *p;
}

Result<StreamFlagSlot> StreamFlagPool::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) {
    // Ready and done of a slot side by side; the block is zeroed, so a first use waits for 1.
    auto block = runtime_->allocHostMapped(kSlotsPerBlock * 2 * sizeof(uint32_t));
    if (!block.ok()) return block.status();
    auto* words = static_cast<uint32_t*>(*block);
    for (size_t i = 0; i < kSlotsPerBlock * 2; ++i) words[i] = 0;
    for (size_t i = kSlotsPerBlock; i-- > 0;)
      free_.push_back(StreamFlagSlot{&words[2 * i], &words[2 * i + 1], 0});
    allocated_ += kSlotsPerBlock;
  }
  StreamFlagSlot s = free_.back();
  free_.pop_back();
  ++s.value;
  return s;
}

void StreamFlagPool::release(const StreamFlagSlot& slot) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
}

void StreamFlagPool::giveBackUnused(const StreamFlagSlot& slot) {
  StreamFlagSlot s = slot;
  --s.value;
  release(s);
}

size_t StreamFlagPool::allocated() {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

size_t StreamFlagPool::available() {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

}  // namespace braid
