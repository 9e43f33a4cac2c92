// Seeded corruption of safetensors images: every truncation, random byte flips in the header,
// huge values at every position of the length field and of numbers in the header, and random
// structural edits of the header's JSON. The reader must answer with a Status, never crash;
// whatever it accepts must be safe to read to the last byte. Run this binary under
// AddressSanitizer or valgrind to check the "never crash" half fully.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/safetensors.h"
#include "loader/corruption.h"
#include "loader/safetensors_builder.h"

namespace ctxpar {
namespace {

using testing::AsBytes;
using testing::ExpectGracefulError;
using testing::FlipBytes;
using testing::SafetensorsImage;
using testing::TensorBytes;
using Json = nlohmann::json;

std::vector<TensorBytes> Tensors() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<uint16_t> bf16(48);
  for (uint16_t& b : bf16) b = static_cast<uint16_t>(bits(rng));
  std::vector<float> f32(20);
  for (float& f : f32) f = static_cast<float>(bits(rng) % 1000) / 7.0f;
  return {{"model.layers.0.self_attn.kv_b_proj.weight", "BF16", {6, 8}, AsBytes(bf16)},
          {"model.norm.weight", "F32", {20}, AsBytes(f32)},
          {"lm_head.weight", "F16", {3, 4}, AsBytes(std::vector<uint16_t>(12, 0x3c00))},
          {"logits", "F64", {2}, AsBytes(std::vector<double>{1.0, -2.0})}};
}

// Reads every element of every tensor an accepted file exposes.
void Exercise(const SafetensorsFile& f) {
  std::vector<double> out;
  for (const SafetensorsTensor& t : f.tensors()) {
    ASSERT_LE(t.end, f.file_size());
    out.resize(static_cast<size_t>(t.num_elements()));
    EXPECT_TRUE(CopyElements(t, 0, t.num_elements(), out.data()).ok()) << t.name;
  }
}

void Check(std::vector<uint8_t> bytes, const std::string& what, int* accepted = nullptr) {
  auto f = SafetensorsFile::FromBytes(std::move(bytes));
  if (f.ok()) {
    if (accepted != nullptr) ++*accepted;
    Exercise(*f);
  } else {
    ExpectGracefulError(f, what);
  }
}

uint64_t HeaderEnd(const std::vector<uint8_t>& image) {
  uint64_t n = 0;
  std::memcpy(&n, image.data(), 8);
  return 8 + n;
}

// The data must end where the file ends, so every cut is an error naming what it lost.
TEST(SafetensorsCorruptionTest, EveryTruncationIsDataLoss) {
  const std::vector<uint8_t> image = SafetensorsImage(Tensors());
  ASSERT_TRUE(SafetensorsFile::FromBytes(image).ok());
  for (size_t cut = 0; cut < image.size(); ++cut) {
    auto f = SafetensorsFile::FromBytes(std::vector<uint8_t>(image.begin(), image.begin() + cut));
    ASSERT_FALSE(f.ok()) << "cut at " << cut;
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << "cut at " << cut;
    const std::string& m = f.status().message();
    if (cut >= HeaderEnd(image)) {
      // The header is whole: the message names the tensor that ran past the end.
      EXPECT_NE(m.find("tensor '"), std::string::npos) << "cut at " << cut << ": " << m;
    }
  }
}

TEST(SafetensorsCorruptionTest, RandomByteFlipsInTheHeader) {
  const std::vector<uint8_t> image = SafetensorsImage(Tensors());
  std::mt19937_64 rng(20261201);
  int accepted = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    Check(FlipBytes(image, HeaderEnd(image), 3, rng), "iteration " + std::to_string(iter),
          &accepted);
  }
  // A flip inside a tensor name leaves a valid file; most flips must not.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, 4000);
}

TEST(SafetensorsCorruptionTest, HugeValuesInTheLengthAndEveryHeaderNumber) {
  const std::vector<uint8_t> image = SafetensorsImage(Tensors());
  const uint64_t kHuge[] = {~0ull, 1ull << 63, (1ull << 63) - 1, 1ull << 40, 0, 7, 9};
  for (uint64_t v : kHuge) {
    std::vector<uint8_t> bad = image;
    std::memcpy(bad.data(), &v, 8);
    Check(std::move(bad), "length " + std::to_string(v));
  }
  // Each digit run of the header replaced by a huge or tiny number, keeping the length field
  // right: offsets, shapes and sizes that disagree in every way.
  const std::string header(image.begin() + 8, image.begin() + HeaderEnd(image));
  const std::vector<uint8_t> data(image.begin() + HeaderEnd(image), image.end());
  const char* kNumbers[] = {"18446744073709551615",
                            "18446744073709551616",
                            "9223372036854775808",
                            "0",
                            "-1",
                            "1e3",
                            "4294967296"};
  for (size_t at = 0; at < header.size(); ++at) {
    if (!std::isdigit(static_cast<unsigned char>(header[at])) ||
        (at > 0 && std::isdigit(static_cast<unsigned char>(header[at - 1])))) {
      continue;
    }
    size_t end = at;
    while (end < header.size() && std::isdigit(static_cast<unsigned char>(header[end]))) ++end;
    for (const char* number : kNumbers) {
      std::string text = header.substr(0, at) + number + header.substr(end);
      std::vector<TensorBytes> raw = {{"", "", {}, data}};
      Check(SafetensorsImage(text, raw),
            "number " + std::string(number) + " at " + std::to_string(at));
    }
  }
}

// Structural edits of the JSON: entries dropped, duplicated under a new name, fields swapped
// between entries, values replaced with other JSON types.
TEST(SafetensorsCorruptionTest, RandomStructuralEdits) {
  const std::vector<TensorBytes> tensors = Tensors();
  std::vector<uint8_t> data;
  for (const TensorBytes& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  const Json good = testing::SafetensorsHeader(tensors);
  const Json kValues[] = {nullptr,
                          true,
                          -3,
                          2.5,
                          "F32",
                          Json::array(),
                          Json::array({1, 2}),
                          Json::array({0, 96}),
                          Json::object(),
                          Json::array({1ull << 62, 2})};
  const char* kFields[] = {"dtype", "shape", "data_offsets"};
  std::vector<std::string> names;
  for (const auto& [name, entry] : good.items()) names.push_back(name);
  std::mt19937 rng(11);
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Json h = good;
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::string& name = names[rng() % names.size()];
      if (!h.contains(name)) continue;
      switch (rng() % 4) {
        case 0:
          h.erase(name);
          break;
        case 1:
          h[name + "_copy"] = h[name];
          break;
        case 2: {
          const std::string& other = names[rng() % names.size()];
          const char* field = kFields[rng() % 3];
          if (h.contains(other) && h[other].is_object() && h[name].is_object()) {
            h[name][field] = h[other].value(field, Json());
          }
          break;
        }
        default:
          if (h[name].is_object()) {
            h[name][kFields[rng() % 3]] = kValues[rng() % std::size(kValues)];
          } else {
            h[name] = kValues[rng() % std::size(kValues)];
          }
      }
    }
    std::vector<TensorBytes> raw = {{"", "", {}, data}};
    Check(SafetensorsImage(h.dump(), raw), "edit " + std::to_string(iter), &accepted);
  }
  EXPECT_LT(accepted, 3000);
}

}  // namespace
}  // namespace ctxpar
