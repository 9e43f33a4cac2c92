#include "models/layers/compute_types.h"

#include "compute/cpu_compute.h"

namespace ctxpar::model {

std::unique_ptr<compute::Compute> ComputeFor(const EngineConfig& config, ThreadPool* threads) {
  ActFormat format = ActFormat::kF32;
  if (config.llama_cpp_numerics) {
    format = ActFormat::kQ8;
  } else if (config.int8_matmuls) {
    format = ActFormat::kInt8;
  }
  return std::make_unique<compute::CpuCompute>(threads, format);
}

}  // namespace ctxpar::model
