// The partial-attention test problem: a paged KV cache with pages shuffled over the pool, in
// either page format, random Q, and a float64 reference. The pool is random element by element,
// so it is valid in any format; the reference reads it through KvElementOffset, which is what
// holds the kernels' own addressing to attention.h's layouts.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/attention.h"
#include "ctxpar/dtype.h"

namespace ctxpar::testing {

inline uint16_t ToBf16(float x) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

inline double FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Shape {
  int num_q_heads;
  int num_kv_heads;
  int head_dim_qk;
  int head_dim_v;
  bool mla;  // V is the prefix of K
  DataType dtype;
  int page_size;
  KvPageFormat format = KvPageFormat::kRows;
};

class Problem {
 public:
  Problem(const Shape& shape, std::vector<int> seq_lens, uint32_t seed)
      : shape_(shape), seq_lens_(std::move(seq_lens)), rng_(seed) {
    const int ps = shape_.page_size;
    for (int len : seq_lens_) max_pages_ = std::max(max_pages_, (len + ps - 1) / ps);
    max_pages_ = std::max(max_pages_, 1);
    const int num_seqs = static_cast<int>(seq_lens_.size());
    num_pages_ = num_seqs * max_pages_ + 3;
    std::vector<int32_t> perm(num_pages_);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    block_table_.assign(perm.begin(), perm.begin() + num_seqs * max_pages_);
    const int64_t slots = static_cast<int64_t>(num_pages_) * ps * shape_.num_kv_heads;
    Fill(slots * shape_.head_dim_qk, kf_, kb_);
    if (!shape_.mla) Fill(slots * shape_.head_dim_v, vf_, vb_);

    kv_.k = Data(kf_, kb_);
    if (!shape_.mla) kv_.v = Data(vf_, vb_);
    kv_.dtype = shape_.dtype;
    kv_.page_size = ps;
    kv_.num_kv_heads = shape_.num_kv_heads;
    kv_.head_dim_qk = shape_.head_dim_qk;
    kv_.head_dim_v = shape_.head_dim_v;
    kv_.block_table = block_table_.data();
    kv_.max_pages_per_seq = max_pages_;
    kv_.num_pages = num_pages_;
    kv_.format = shape_.format;
  }
  // kv_ points into the pools.
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  // Writes NaN (fp32 0x7fc00000, bf16 0x7fc0, fp8 e4m3 0x7f, e5m2 0x7e) into every K and V element
  // that is not a key of a sequence: the slots past each sequence's length, and the pages no block
  // table names.
  void PoisonUnusedKeys() {
    const int ps = shape_.page_size;
    std::vector<bool> key(static_cast<size_t>(num_pages_) * ps, false);
    for (size_t s = 0; s < seq_lens_.size(); ++s) {
      for (int r = 0; r < seq_lens_[s]; ++r) {
        key[static_cast<size_t>(block_table_[s * max_pages_ + r / ps]) * ps + r % ps] = true;
      }
    }
    PoisonAllBut(key);
  }

  void PoisonAllBut(const std::vector<bool>& key) {
    const int ps = shape_.page_size;
    for (int page = 0; page < num_pages_; ++page) {
      for (int slot = 0; slot < ps; ++slot) {
        if (key[static_cast<size_t>(page) * ps + slot]) continue;
        for (int h = 0; h < shape_.num_kv_heads; ++h) {
          for (int d = 0; d < shape_.head_dim_qk; ++d) Poison(false, page, slot, h, d, kf_, kb_);
          if (shape_.mla) continue;
          for (int d = 0; d < shape_.head_dim_v; ++d) Poison(true, page, slot, h, d, vf_, vb_);
        }
      }
    }
  }

  // Decode: one row per sequence seeing all of it. Rows are fixed by the first Params().
  void DecodeRows() {
    for (int s = 0; s < static_cast<int>(seq_lens_.size()); ++s) AddRow(s, seq_lens_[s]);
  }
  // A row of sequence seq that sees its local rows [kv_start, kv_len).
  void AddRow(int seq, int kv_len, int kv_start = 0) {
    row_seq_.push_back(seq);
    row_kv_len_.push_back(kv_len);
    row_kv_start_.push_back(kv_start);
  }

  // Writes NaN into every K and V element that no row sees (outside every row's [start, len) of
  // its sequence), as a sliding window leaves the keys before it.
  void PoisonUnseenKeys() {
    const int ps = shape_.page_size;
    std::vector<bool> seen(static_cast<size_t>(num_pages_) * ps, false);
    for (size_t i = 0; i < row_seq_.size(); ++i) {
      for (int r = row_kv_start_[i]; r < row_kv_len_[i]; ++r) {
        seen[static_cast<size_t>(block_table_[row_seq_[i] * max_pages_ + r / ps]) * ps + r % ps] =
            true;
      }
    }
    PoisonAllBut(seen);
  }

  PartialAttentionParams Params() {
    const int rows = static_cast<int>(row_seq_.size());
    if (q_.empty())
      q_ = Random(static_cast<int64_t>(rows) * shape_.num_q_heads * shape_.head_dim_qk);
    o_.assign(static_cast<size_t>(rows) * shape_.num_q_heads * shape_.head_dim_v, NAN);
    lse_.assign(static_cast<size_t>(rows) * shape_.num_q_heads, NAN);
    PartialAttentionParams p;
    p.q = q_.data();
    p.o = o_.data();
    p.lse = lse_.data();
    p.num_rows = rows;
    p.num_q_heads = shape_.num_q_heads;
    p.row_seq = row_seq_.data();
    p.row_kv_len = row_kv_len_.data();
    p.row_kv_start = row_kv_start_.data();
    p.scale = 1.0f / std::sqrt(static_cast<float>(shape_.head_dim_qk));
    p.kv = kv_;
    p.num_seqs = static_cast<int>(seq_lens_.size());
    return p;
  }

  // Checks o_ and lse_ against the float64 reference within tol.
  void Check(const PartialAttentionParams& p, double tol, const std::string& what) const {
    const int group = shape_.num_q_heads / shape_.num_kv_heads;
    const int dqk = shape_.head_dim_qk;
    const int dv = shape_.head_dim_v;
    int failures = 0;
    for (size_t i = 0; i < row_seq_.size() && failures < 5; ++i) {
      for (int h = 0; h < shape_.num_q_heads && failures < 5; ++h) {
        const int kvh = h / group;
        const float* q = q_.data() + (i * shape_.num_q_heads + h) * dqk;
        const int len = row_kv_len_[i], start = row_kv_start_[i];
        std::vector<double> s(len);
        double m = -INFINITY;
        for (int j = start; j < len; ++j) {
          double dot = 0;
          for (int d = 0; d < dqk; ++d)
            dot += static_cast<double>(q[d]) * Read(false, row_seq_[i], j, kvh, d);
          s[j] = static_cast<double>(p.scale) * dot;
          if (p.softcap > 0.0f) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
          m = std::max(m, s[j]);
        }
        std::vector<double> o(dv, 0.0);
        double l = 0;
        for (int j = start; j < len; ++j) {
          const double w = std::exp(s[j] - m);
          l += w;
          for (int d = 0; d < dv; ++d) o[d] += w * Read(true, row_seq_[i], j, kvh, d);
        }
        const bool empty = len == start;
        const double ref_lse = empty ? -INFINITY : m + std::log(l);
        const float got_lse = lse_[i * shape_.num_q_heads + h];
        const std::string where = what + " row " + std::to_string(i) + " head " +
                                  std::to_string(h) + " rows [" + std::to_string(start) + ", " +
                                  std::to_string(len) + ")";
        if (empty) {
          if (!(std::isinf(got_lse) && got_lse < 0)) {
            ADD_FAILURE() << where << ": lse " << got_lse << ", want -inf";
            ++failures;
          }
        } else if (!(std::abs(got_lse - ref_lse) <= tol * std::max(1.0, std::abs(ref_lse)))) {
          ADD_FAILURE() << where << ": lse " << got_lse << ", want " << ref_lse;
          ++failures;
        }
        const float* got = o_.data() + (i * shape_.num_q_heads + h) * dv;
        for (int d = 0; d < dv; ++d) {
          const double want = empty ? 0.0 : o[d] / l;
          if (!(std::abs(got[d] - want) <= tol)) {
            ADD_FAILURE() << where << " d " << d << ": O " << got[d] << ", want " << want;
            ++failures;
            break;
          }
        }
      }
    }
  }

  const Shape& shape() const { return shape_; }
  std::vector<float>& q() { return q_; }

 private:
  std::vector<float> Random(int64_t n) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(n);
    for (float& e : x) e = u(rng_);
    return x;
  }
  bool Fp8() const {
    return shape_.dtype == DataType::kF8E4M3 || shape_.dtype == DataType::kF8E5M2;
  }
  const void* Data(const std::vector<float>& f, const std::vector<uint16_t>& b) const {
    if (shape_.dtype == DataType::kF32) return f.data();
    return b.data();
  }
  void Fill(int64_t n, std::vector<float>& f, std::vector<uint16_t>& b) {
    f = Random(n);
    if (shape_.dtype == DataType::kF32) return;
    b.assign(Fp8() ? (n + 1) / 2 : n, 0);
    for (int64_t i = 0; i < n; ++i) Set(b, i, Encode(f[i]));
    f.clear();
  }
  uint16_t Encode(float x) const {
    if (shape_.dtype == DataType::kF8E4M3) return FloatToFp8E4M3(x);
    if (shape_.dtype == DataType::kF8E5M2) return FloatToFp8E5M2(x);
    return ToBf16(x);
  }
  void Set(std::vector<uint16_t>& b, int64_t i, uint16_t x) const {
    if (Fp8()) {
      reinterpret_cast<uint8_t*>(b.data())[i] = static_cast<uint8_t>(x);
    } else {
      b[i] = x;
    }
  }
  double Decode(const std::vector<uint16_t>& b, int64_t i) const {
    if (!Fp8()) return FromBf16(b[i]);
    const uint8_t c = reinterpret_cast<const uint8_t*>(b.data())[i];
    return shape_.dtype == DataType::kF8E4M3 ? Fp8E4M3ToFloat(c) : Fp8E5M2ToFloat(c);
  }
  void Poison(bool value, int page, int slot, int h, int d, std::vector<float>& f,
              std::vector<uint16_t>& b) {
    const int64_t at = KvElementOffset(kv_, value, page, slot, h, d);
    if (shape_.dtype == DataType::kF32) {
      f[at] = std::numeric_limits<float>::quiet_NaN();
    } else {
      Set(b, at,
          shape_.dtype == DataType::kF8E4M3   ? 0x7f
          : shape_.dtype == DataType::kF8E5M2 ? 0x7e
                                              : 0x7fc0);
    }
  }

  // K (or V when `value`) of local row r of sequence seq, where the page format puts it. V of MLA
  // is the K row's prefix, which KvElementOffset addresses in the K pool.
  double Read(bool value, int seq, int r, int kvh, int d) const {
    const int ps = shape_.page_size;
    const int64_t at =
        KvElementOffset(kv_, value, block_table_[seq * max_pages_ + r / ps], r % ps, kvh, d);
    const bool in_v = value && !shape_.mla;
    if (shape_.dtype == DataType::kF32) return in_v ? vf_[at] : kf_[at];
    return Decode(in_v ? vb_ : kb_, at);
  }

  Shape shape_;
  std::vector<int> seq_lens_;
  std::mt19937 rng_;
  int max_pages_ = 0;
  int num_pages_ = 0;
  std::vector<int32_t> block_table_;
  std::vector<float> kf_, vf_;
  std::vector<uint16_t> kb_, vb_;  // bf16, or fp8 codes two to an entry
  PagedKv kv_;                     // the pools above, in shape_.format
  std::vector<float> q_, o_, lse_;
  std::vector<int32_t> row_seq_, row_kv_len_, row_kv_start_;
};

}  // namespace ctxpar::testing
