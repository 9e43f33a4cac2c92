// Stands in for ggml.h, which the vendored common/json.cpp includes only for GGML_ASSERT (its
// JSON_ASSERT): ggml's assert aborts in every build type, and so does this one.
#pragma once

#include <cstdio>
#include <cstdlib>

#define GGML_ASSERT(x)                                                           \
  do {                                                                           \
    if (!(x)) {                                                                  \
      std::fprintf(stderr, "%s:%d: GGML_ASSERT(%s) failed\n", __FILE__, __LINE__, #x); \
      std::abort();                                                              \
    }                                                                            \
  } while (0)
