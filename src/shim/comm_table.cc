// comm_table: see comm_table.h.
#include "shim/comm_table.h"

#include <atomic>

namespace tpcomm {
namespace shim {

CommTable& CommTable::instance() {
  static CommTable* table = new CommTable;  // never destroyed: engines tear down at exit
  return *table;
}

void CommTable::add(const std::shared_ptr<ShimComm>& c) {
  std::lock_guard<std::mutex> lock(mu_);
  comms_[c->real] = c;
}

std::shared_ptr<ShimComm> CommTable::find(ncclComm_t real) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = comms_.find(real);
  return it == comms_.end() ? nullptr : it->second;
}

std::shared_ptr<ShimComm> CommTable::take(ncclComm_t real) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = comms_.find(real);
  if (it == comms_.end()) return nullptr;
  std::shared_ptr<ShimComm> c = it->second;
  comms_.erase(it);
  return c;
}

std::vector<std::shared_ptr<ShimComm>> CommTable::sameCreation(const std::string& key, uint64_t creation) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<ShimComm>> out;
  for (const auto& kv : comms_)
    if (kv.second->key == key && kv.second->creation == creation) out.push_back(kv.second);
  return out;
}

size_t CommTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return comms_.size();
}

uint64_t nextCreation() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

std::string keyOfUniqueId(const ncclUniqueId& id) {
  static const char* hex = "0123456789abcdef";
  std::string k = "id:";
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    unsigned char b = static_cast<unsigned char>(id.internal[i]);
    k += hex[b >> 4];
    k += hex[b & 15];
  }
  return k;
}

std::string keyOfInitAll(uint64_t creation) { return "initall:" + std::to_string(creation); }

std::string keyOfSplit(const std::string& parentKey, int color) {
  return "split:" + std::to_string(color) + ":" + parentKey;
}

}  // namespace shim
}  // namespace tpcomm
