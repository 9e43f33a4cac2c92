// Elementwise reductions shared by the in-process and MPI communicators.
#pragma once

#include <cstddef>

#include "ctxpar/communicator.h"

namespace ctxpar::comm_internal {

// inout[i] := op(inout[i], in[i]) for `count` elements of `dtype` (bf16 through float, rounded to
// nearest even). u8 and i32 sums wrap like the C types.
void ReduceInto(void* inout, const void* in, std::size_t count, DataType dtype, ReduceOp op);

}  // namespace ctxpar::comm_internal
