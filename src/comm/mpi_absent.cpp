// Built when ctxpar has no MPI: the world communicator is unavailable, with the way to get it.
#include "ctxpar/communicator.h"

namespace ctxpar {

bool MpiCompiledIn() { return false; }

Expected<std::unique_ptr<Communicator>> MakeMpiWorld() {
  return Unavailable(
      "MakeMpiWorld: ctxpar was built without MPI (apt-get install -y libopenmpi-dev openmpi-bin, "
      "then reconfigure)");
}

}  // namespace ctxpar
