// Writes a modified copy of a GGUF model, after the GGUF v3 specification: the first `layers`
// blocks of the source only (blk.N.* for N >= layers dropped, <arch>.block_count set), and
// metadata entries replaced by key. The STANDALONE tests make draft models this way: SmolLM2's
// first layers, a draft that shares its vocabulary and disagrees with it at times, and the same
// with one token's text changed, a vocabulary that is not the target's.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "ctxpar/gguf.h"
#include "ctxpar/status.h"

namespace ctxpar::testing {

namespace gguf_copy_internal {

class Bytes {
 public:
  template <typename T>
  void Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void Str(const std::string& s) {
    Pod<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  // A value's body: a scalar, a string, or an array's element type, count and elements.
  void Value(const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            Str(x);
          } else if constexpr (std::is_arithmetic_v<T>) {
            Pod(x);
          } else {
            Pod(static_cast<uint32_t>(v.element_type()));
            Pod<uint64_t>(x.size());
            for (const auto& e : x) Element(e);
          }
        },
        v.data());
  }
  std::vector<uint8_t> out;

 private:
  void Element(const std::string& e) { Str(e); }
  void Element(const GgufValue& e) { Value(e); }
  void Element(bool e) { Pod<uint8_t>(e ? 1 : 0); }
  template <typename T>
  void Element(T e) {
    Pod(e);
  }
};

}  // namespace gguf_copy_internal

inline Status WriteGgufCopy(const std::string& src, const std::string& dst, int layers,
                            const std::vector<GgufMetadataEntry>& replace = {}) {
  CTXPAR_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(src));
  CTXPAR_ASSIGN_OR_RETURN(const std::string arch, file.GetString("general.architecture"));
  const std::string block_count = arch + ".block_count";
  std::vector<const GgufTensor*> kept;
  for (const GgufTensor& t : file.tensors()) {
    if (t.name.starts_with("blk.") && std::stoi(t.name.substr(4)) >= layers) continue;
    kept.push_back(&t);
  }
  gguf_copy_internal::Bytes b;
  b.out = {'G', 'G', 'U', 'F'};
  b.Pod<uint32_t>(3);
  b.Pod<uint64_t>(kept.size());
  b.Pod<uint64_t>(file.metadata().size());
  for (const GgufMetadataEntry& m : file.metadata()) {
    const GgufValue* v = &m.value;
    const GgufValue count(static_cast<uint32_t>(layers));
    if (m.key == block_count) v = &count;
    for (const GgufMetadataEntry& r : replace) {
      if (r.key == m.key) v = &r.value;
    }
    b.Str(m.key);
    b.Pod(static_cast<uint32_t>(v->type()));
    b.Value(*v);
  }
  const uint64_t align = file.alignment();
  auto aligned = [&](uint64_t n) { return (n + align - 1) / align * align; };
  uint64_t offset = 0;
  for (const GgufTensor* t : kept) {
    b.Str(t->name);
    b.Pod(static_cast<uint32_t>(t->shape.size()));
    for (int64_t d : t->shape) b.Pod(static_cast<uint64_t>(d));
    b.Pod(static_cast<uint32_t>(t->type));
    b.Pod(offset);
    offset = aligned(offset + t->size_bytes);
  }
  b.out.resize(aligned(b.out.size()), 0);
  const std::size_t data = b.out.size();
  b.out.resize(data + offset, 0);
  offset = 0;
  for (const GgufTensor* t : kept) {
    std::memcpy(b.out.data() + data + offset, t->data, t->size_bytes);
    offset = aligned(offset + t->size_bytes);
  }
  std::ofstream out(dst, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.out.data()),
            static_cast<std::streamsize>(b.out.size()));
  if (!out) return Internal("cannot write " + dst);
  return Status::Ok();
}

}  // namespace ctxpar::testing
