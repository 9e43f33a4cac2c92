// Helper for death_test: under mpiexec, rank 1 dies in the middle of a collective (how: argv[1]
// = "abort", "exit1" or "exit0") while the other ranks wait inside an all-reduce.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ctxpar/communicator.h"

int main(int argc, char** argv) {
  auto world = ctxpar::MakeMpiWorld();
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  ctxpar::Communicator& comm = **world;
  if (!comm.Barrier().ok()) return 1;
  const char* how = argc > 1 ? argv[1] : "abort";
  if (comm.rank() == 1) {
    usleep(200 * 1000);
    if (std::strcmp(how, "exit0") == 0) _exit(0);
    if (std::strcmp(how, "exit1") == 0) _exit(1);
    std::abort();
  }
  float x = 1;
  ctxpar::Status st = comm.AllReduce(&x, &x, 1, ctxpar::DataType::kF32, ctxpar::ReduceOp::kSum);
  std::fprintf(stderr, "rank %d: the all-reduce returned: %s\n", comm.rank(),
               st.ToString().c_str());
  return st.ok() ? 0 : 1;
}
