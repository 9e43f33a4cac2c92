// The AMX tile configuration and its load, shared by the AMX units (the int8 and bf16 matmuls in
// src/compute, the attention in src/attention). Internal: each unit includes it inside its own
// unnamed namespace, after <immintrin.h>, <cstdint> and <cstring>, so that it compiles its own
// copy with the AMX flags.

// No include guard on purpose: each AMX unit includes this once inside its own namespace.

struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Loads `want` unless it is the thread's configuration already (read back with sttilecfg): other
// code on the thread (the other AMX kernel, a benchmark's peak loop, a tilerelease) may have
// changed it, and loading it again drains the tile unit.
inline void LoadTileConfig(const TileConfig& want) {
  TileConfig have;
  _tile_storeconfig(&have);
  if (std::memcmp(&have, &want, sizeof(TileConfig)) != 0) _tile_loadconfig(&want);
}
