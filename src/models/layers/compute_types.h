// The compute seam as the models see it: its vocabulary (compute.h: weights, activation formats,
// RoPE and activations) under the names the architectures use, and the seam a launch
// configuration runs on.
#pragma once

#include <memory>

#include "compute/compute.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar::model {

using compute::ActFormat;
using compute::BlockBytes;
using compute::BlockSize;
using compute::CheckActFormat;
using compute::DequantizeRow;
using compute::F32Matrix;
using compute::GatedActivation;
using compute::HfYarn;
using compute::Int8Takes;
using compute::kBlock;
using compute::kMatMulTypes;
using compute::LineVector;
using compute::MatMulOut;
using compute::QuantMatrix;
using compute::RopeAngles;
using compute::RopeScaling;
using compute::RopeStyle;
using compute::WeightType;
using compute::WeightTypeFor;
using compute::WithInt8Pack;
using compute::YarnMscale;

// The rank's compute seam for `config`: the CPU's, its quantized products taking int8 blocks as
// llama.cpp does (--llama-cpp-numerics), the matrix units (--dtype auto) or fp32 activations.
// `threads` (not owned, may be null: the caller's thread) runs its rows.
std::unique_ptr<compute::Compute> ComputeFor(const EngineConfig& config, ThreadPool* threads);

}  // namespace ctxpar::model
