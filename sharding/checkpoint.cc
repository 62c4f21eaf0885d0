// Checkpoints of a sharded model (spec/sharding.md section 2, "Checkpoints"): every rank writes
// its OS shards (fp32 master, m, v), rank 0 a text manifest that says which element range of
// which bucket each rank's file holds. Loading reads, for each rank of the new configuration,
// the ranges of its P and OS shards from whichever files hold them, so the configuration and the
// rank count may change between save and load (resharding). The parameters are not saved: they
// are always the master weights rounded to the parameter dtype, so they are rebuilt from them.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/dtype.h"
#include "sharding/last_error.h"
#include "sharding/layout.h"
#include "sharding/state.h"

using namespace braid::shard;

namespace {

constexpr const char* kMagic = "braid-shard-checkpoint";
constexpr int kFormat = 1;
constexpr char kFileMagic[16] = {'B', 'R', 'A', 'I', 'D', 'S', 'H', 'A',
                                 'R', 'D', 'C', 'K', 'P', 'T', '0', '1'};

std::string RankFile(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.bin", rank);
  return name;
}

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<FILE, FileCloser>;

// The checks both calls make before touching anything; "" when the handle is at rest.
std::string AtRest(braidShard* sh) {
  if (sh->prepared) return "a prepared step is open (call braidShardFinishStep)";
  for (size_t b = 0; b < sh->buckets.size(); ++b) {
    if (sh->buckets[b].gathered)
      return "bucket " + std::to_string(b) + " is still gathered (release it first)";
    if (sh->buckets[b].reduced)
      return "bucket " + std::to_string(b) +
             " has accumulated gradients (checkpoint after braidShardStep)";
  }
  return "";
}

// This rank's file: the magic, then per bucket its OS shard's master, m and v (padded length).
std::string WriteRankFile(braidShard* sh, const std::string& path) {
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) return "cannot create " + path + ": " + std::strerror(errno);
  bool ok = std::fwrite(kFileMagic, 1, sizeof(kFileMagic), f.get()) == sizeof(kFileMagic);
  for (const Bucket& k : sh->buckets)
    for (const std::vector<float>* v : {&k.master, &k.m, &k.v})
      ok = ok && std::fwrite(v->data(), sizeof(float), v->size(), f.get()) == v->size();
  ok = ok && std::fflush(f.get()) == 0;
  const int err = errno;
  if (std::fclose(f.release()) != 0 || !ok)
    return "cannot write " + path + ": " + std::strerror(ok ? errno : err);
  return "";
}

std::string Manifest(braidShard* sh) {
  const braidShardConfig_t& c = sh->cfg;
  std::ostringstream m;
  m << kMagic << " " << kFormat << "\n";
  m << "ranks " << sh->nranks << "\n";
  m << "shape " << c.ranksPerNode << " " << c.nodes << "\n";
  m << "p " << c.p.intra << " " << c.p.inter << "\n";
  m << "g " << c.g.intra << " " << c.g.inter << "\n";
  m << "os " << c.os.intra << " " << c.os.inter << "\n";
  m << "replicaEveryMicrobatch " << c.replicaEveryMicrobatch << "\n";
  m << "preset " << (c.preset[0] ? c.preset : "-") << "\n";
  m << "dtype " << static_cast<int>(sh->dtype) << "\n";
  m << "step " << sh->t << "\n";
  char scaler[160];
  // %.9g: a float survives the round trip through text exactly.
  std::snprintf(scaler, sizeof(scaler), "scaler %d %.9g %.9g %.9g %d %.9g %lld\n",
                sh->scaler_on ? 1 : 0, sh->scaler.initScale, sh->scaler.growthFactor,
                sh->scaler.backoffFactor, sh->scaler.growthInterval, sh->scale,
                static_cast<long long>(sh->good_steps));
  m << scaler;
  m << "buckets " << sh->buckets.size() << "\n";
  for (size_t b = 0; b < sh->buckets.size(); ++b)
    m << "bucket " << b << " " << sh->buckets[b].numel << " " << sh->buckets[b].padded << "\n";
  // Each rank's file and ranges: rank, bucket, first element, elements (padded shard length),
  // byte offset of the bucket's section in the file. The ranks' layout is a pure function of
  // (configuration, rank), so rank 0 writes every rank's line.
  const int so = sh->S(kOs);
  for (int r = 0; r < sh->nranks; ++r) {
    m << "rank " << r << " " << RankFile(r) << "\n";
    const RankLayout l = Layout(c, r);
    uint64_t at = sizeof(kFileMagic);
    for (size_t b = 0; b < sh->buckets.size(); ++b) {
      const size_t len = sh->buckets[b].padded / so;
      m << "range " << r << " " << b << " " << l.pos[kOs] * len << " " << len << " " << at << "\n";
      at += 3 * len * sizeof(float);
    }
  }
  m << "end\n";
  return m.str();
}

std::string WriteManifest(braidShard* sh, const std::string& dir) {
  const std::string path = dir + "/manifest.txt", tmp = path + ".tmp";
  const std::string text = Manifest(sh);
  File f(std::fopen(tmp.c_str(), "w"));
  if (!f) return "cannot create " + tmp + ": " + std::strerror(errno);
  bool ok = std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  if (std::fclose(f.release()) != 0 || !ok)
    return "cannot write " + tmp + ": " + std::strerror(errno);
  // Renamed last: a manifest that exists is complete, and so are the files it names.
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return "cannot rename " + tmp + ": " + std::strerror(errno);
  return "";
}

struct Range {
  int rank;
  size_t first, len;
  uint64_t at;
};

struct Checkpoint {
  int ranks = 0;
  int dtype = -1;
  int64_t step = 0;
  int scaler_on = 0;
  braidShardLossScaler_t scaler{};
  float scale = 1.0f;
  long long good = 0;
  std::vector<size_t> numel;
  std::map<int, std::string> files;
  // Per bucket: first element -> the first range that starts there (replicas hold the same).
  std::vector<std::map<size_t, Range>> ranges;
};

std::string ReadManifest(const std::string& dir, Checkpoint* ck) {
  const std::string path = dir + "/manifest.txt";
  File f(std::fopen(path.c_str(), "r"));
  if (!f) return "cannot open " + path + ": " + std::strerror(errno);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) text.append(buf, n);
  std::istringstream in(text);
  std::string word;
  int format = 0;
  if (!(in >> word >> format) || word != kMagic || format != kFormat)
    return path + " is not a braid shard checkpoint of format " + std::to_string(kFormat);
  bool end = false;
  while (!end && in >> word) {
    if (word == "ranks") {
      in >> ck->ranks;
    } else if (word == "dtype") {
      in >> ck->dtype;
    } else if (word == "step") {
      in >> ck->step;
    } else if (word == "scaler") {
      in >> ck->scaler_on >> ck->scaler.initScale >> ck->scaler.growthFactor >>
          ck->scaler.backoffFactor >> ck->scaler.growthInterval >> ck->scale >> ck->good;
      ck->scaler.size = sizeof(ck->scaler);
    } else if (word == "buckets") {
      size_t nb = 0;
      in >> nb;
      if (nb > (1u << 24)) return path + ": implausible bucket count " + std::to_string(nb);
      ck->numel.assign(nb, 0);
      ck->ranges.assign(nb, {});
    } else if (word == "bucket") {
      size_t b = 0, numel = 0, padded = 0;
      in >> b >> numel >> padded;
      if (!in || b >= ck->numel.size()) return path + ": bad bucket line";
      ck->numel[b] = numel;
    } else if (word == "rank") {
      int r = 0;
      std::string file;
      in >> r >> file;
      ck->files[r] = file;
    } else if (word == "range") {
      Range x{};
      size_t b = 0;
      in >> x.rank >> b >> x.first >> x.len >> x.at;
      if (!in || b >= ck->ranges.size() || x.len == 0) return path + ": bad range line";
      ck->ranges[b].emplace(x.first, x);  // keeps the first rank that holds this range
    } else if (word == "end") {
      end = true;
    } else {
      std::string rest;
      std::getline(in, rest);  // shape, factors, preset: informational
    }
    if (!in) return path + ": cannot parse the line of '" + word + "'";
  }
  if (!end) return path + " is truncated (no 'end' line)";
  return "";
}

// Reads elements [first, first + len) of field `field` (0 master, 1 m, 2 v) of bucket b into
// out (zero beyond the bucket's end: the padding).
std::string ReadRange(const std::string& dir, const Checkpoint& ck, std::map<int, File>* open,
                      size_t b, int field, size_t first, size_t len, float* out) {
  std::fill(out, out + len, 0.0f);
  const size_t end = std::min(first + len, ck.numel[b]);
  for (size_t e = first; e < end;) {
    auto it = ck.ranges[b].upper_bound(e);
    if (it == ck.ranges[b].begin())
      return "no file holds element " + std::to_string(e) + " of bucket " + std::to_string(b);
    const Range& r = std::prev(it)->second;
    if (e >= r.first + r.len)
      return "no file holds element " + std::to_string(e) + " of bucket " + std::to_string(b);
    const size_t run = std::min(end, r.first + r.len) - e;
    auto file = ck.files.find(r.rank);
    if (file == ck.files.end())
      return "the manifest names no file for rank " + std::to_string(r.rank);
    File& f = (*open)[r.rank];
    const std::string path = dir + "/" + file->second;
    if (!f) {
      f.reset(std::fopen(path.c_str(), "rb"));
      if (!f) return "cannot open " + path + ": " + std::strerror(errno);
    }
    const uint64_t at = r.at + (static_cast<uint64_t>(field) * r.len + (e - r.first)) * 4;
    if (std::fseek(f.get(), static_cast<long>(at), SEEK_SET) != 0 ||
        std::fread(out + (e - first), sizeof(float), run, f.get()) != run)
      return "cannot read " + std::to_string(run) + " elements at byte " + std::to_string(at) +
             " of " + path + " (truncated?)";
    e += run;
  }
  return "";
}

}  // namespace

static braidResult_t ShardSaveImpl(braidShard_t sh, const char* dir) {
  if (!sh || !dir) return SetLastError(braidErrInvalidArgument, "braidShardSave: NULL");
  braidResult_t rc = FinishPrefetches(sh, "braidShardSave");
  if (rc == braidSuccess) rc = FinishPending(sh);
  if (rc != braidSuccess) return rc;
  // Agreed before any file is written, so a refusal leaves nothing half-written.
  rc = Agree(sh, "braidShardSave", AtRest(sh), braidErrInvalidUsage);
  if (rc != braidSuccess) return rc;
  // An older checkpoint's manifest goes first: while the files are rewritten, the directory must
  // not look like a complete checkpoint.
  std::string removed;
  if (sh->rank == 0) {
    const std::string old = std::string(dir) + "/manifest.txt";
    if (std::remove(old.c_str()) != 0 && errno != ENOENT)
      removed = "cannot remove the old " + old + ": " + std::strerror(errno);
  }
  rc = Agree(sh, "braidShardSave", removed, braidErrSystem);
  if (rc != braidSuccess) return rc;
  rc = Agree(sh, "braidShardSave", WriteRankFile(sh, std::string(dir) + "/" + RankFile(sh->rank)),
             braidErrSystem);
  if (rc != braidSuccess) return rc;
  // The manifest last, once every rank's file is complete.
  return Agree(sh, "braidShardSave", sh->rank == 0 ? WriteManifest(sh, dir) : "", braidErrSystem);
}

static braidResult_t ShardLoadImpl(braidShard_t sh, const char* dir) {
  if (!sh || !dir) return SetLastError(braidErrInvalidArgument, "braidShardLoad: NULL");
  braidResult_t rc = FinishPrefetches(sh, "braidShardLoad");
  if (rc == braidSuccess) rc = FinishPending(sh);
  if (rc != braidSuccess) return rc;
  std::string err = sh->prepared ? "a prepared step is open (call braidShardFinishStep)" : "";
  for (size_t b = 0; err.empty() && b < sh->buckets.size(); ++b)
    if (sh->buckets[b].gathered)
      err = "bucket " + std::to_string(b) + " is still gathered (release it first)";
  Checkpoint ck;
  if (err.empty()) err = ReadManifest(dir, &ck);
  // The model must be the checkpoint's: same buckets, same sizes, same parameter type.
  if (err.empty() && ck.numel.size() != sh->buckets.size())
    err = std::string("checkpoint ") + dir + " has " + std::to_string(ck.numel.size()) +
          " buckets but this model " + std::to_string(sh->buckets.size()) + ": it is another model";
  for (size_t b = 0; err.empty() && b < sh->buckets.size(); ++b)
    if (ck.numel[b] != sh->buckets[b].numel)
      err = std::string("checkpoint ") + dir + ": bucket " + std::to_string(b) + " has " +
            std::to_string(ck.numel[b]) + " elements but this model's " +
            std::to_string(sh->buckets[b].numel) + ": it is another model";
  if (err.empty() && ck.dtype != static_cast<int>(sh->dtype))
    err = std::string("checkpoint ") + dir + " has parameter type " + std::to_string(ck.dtype) +
          " but this model " + std::to_string(static_cast<int>(sh->dtype));
  // Read everything first; the handle changes only once every rank has read its part.
  struct Part {
    std::vector<float> p, master, m, v;
  };
  std::vector<Part> parts(sh->buckets.size());
  std::map<int, File> open;
  const int sp = sh->S(kP), so = sh->S(kOs);
  for (size_t b = 0; err.empty() && b < sh->buckets.size(); ++b) {
    const Bucket& k = sh->buckets[b];
    const size_t p_len = k.padded / sp, o_len = k.padded / so;
    const size_t p_first = sh->layout.pos[kP] * p_len, o_first = sh->layout.pos[kOs] * o_len;
    Part& x = parts[b];
    x.p.resize(p_len);
    x.master.resize(o_len);
    x.m.resize(o_len);
    x.v.resize(o_len);
    err = ReadRange(dir, ck, &open, b, 0, p_first, p_len, x.p.data());
    if (err.empty()) err = ReadRange(dir, ck, &open, b, 0, o_first, o_len, x.master.data());
    if (err.empty()) err = ReadRange(dir, ck, &open, b, 1, o_first, o_len, x.m.data());
    if (err.empty()) err = ReadRange(dir, ck, &open, b, 2, o_first, o_len, x.v.data());
    if (!err.empty()) err = std::string("checkpoint ") + dir + ": " + err;
  }
  open.clear();
  rc = Agree(sh, "braidShardLoad", err, braidErrInvalidUsage);
  if (rc != braidSuccess) return rc;
  for (size_t b = 0; b < sh->buckets.size(); ++b) {
    Bucket& k = sh->buckets[b];
    Part& x = parts[b];
    for (size_t i = 0; i < x.p.size(); ++i) Store(sh->dtype, k.param_shard.data(), i, x.p[i]);
    k.master.swap(x.master);
    k.m.swap(x.m);
    k.v.swap(x.v);
    std::fill(k.grad_shard.begin(), k.grad_shard.end(), 0);
    k.reduced = 0;
    k.gathers = 0;
    k.secondary_valid = false;  // new parameters: the hpZ copy is rebuilt at the next forward
  }
  sh->t = ck.step;
  sh->scaler_on = ck.scaler_on != 0;
  if (sh->scaler_on) sh->scaler = ck.scaler;
  sh->scale = sh->scaler_on ? ck.scale : 1.0f;
  sh->good_steps = ck.good;
  return braidSuccess;
}

extern "C" {
braidResult_t braidShardSave(braidShard_t sh, const char* dir) {
  return NoThrow("braidShardSave", [&] { return ShardSaveImpl(sh, dir); });
}
braidResult_t braidShardLoad(braidShard_t sh, const char* dir) {
  return NoThrow("braidShardLoad", [&] { return ShardLoadImpl(sh, dir); });
}
}  // extern "C"
