// The NCCL communicator in a CUDA build without NCCL: it reports itself absent.
#include "ctxpar/nccl_communicator.h"

namespace ctxpar {

bool NcclCompiledIn() { return false; }

Expected<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator&, void*) {
  return Unavailable(
      "MakeNcclCommunicator: ctxpar was built without NCCL (install NCCL next to the CUDA "
      "toolkit and reconfigure)");
}

}  // namespace ctxpar
