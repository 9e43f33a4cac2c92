// Running a command over MPI ranks from the CLI, with one voice: the user types `ctxpar generate
// --tp-size 3 ...` and never mpirun, sees each error once (from rank 0, with its catalog ID) and
// gets the error's exit status, not mpirun's boilerplate.
//
// Launch (RunUnderMpirun): this process stays the parent of
//   $CTXPAR_MPIRUN (default mpirun) --quiet $CTXPAR_MPIRUN_ARGS -np N <this binary> COMMAND ARGS
// in a process group of its own (stdin from /dev/null), so that a terminal's Ctrl-C reaches this
// process only. The first SIGINT / SIGTERM is passed to the ranks as SIGUSR1 / SIGUSR2, which
// mpirun forwards and signals.h reads as a stop request; after a second one, and a second's
// grace for the stop already under way, the local ranks are killed (SIGKILL), on which mpirun
// ends the job and removes their shared-memory segments. mpirun itself is never signalled
// again: interrupted twice it exits without that cleanup (and Open MPI 4.1's crashes in
// PMIx_Finalize), which is how segments used to be left in /dev/shm. The exit status is
// mpirun's, which --quiet makes the ranks' (see FinishRank), or 128 + the first signal when the
// ranks had to be killed.
// CTXPAR_MPIRUN_ARGS is split at blanks (no quoting), e.g. "--hostfile hosts --mca btl tcp,self".
// Rank 0 holds a TCP connection to the launcher (its address in CTXPAR_LAUNCHER, passed with
// -x) and says when it has finished normally. When the connection closes without that, mpirun
// gets three seconds to end the job; a job it cannot end (a daemon on a host it no longer
// reaches) is then stopped with SIGKILL to mpirun and its local ranks, and the exit status is 1
// (rank 0 has printed the error). Rank 0 that knows a host to be unreachable (its ranks silent,
// CTXPAR-RUN-004) says so first, and mpirun is stopped as soon as rank 0 has ended.
//
// Report (FinishRank): every rank passes its final Status. The ranks agree on the lowest failing
// rank (an all-reduce) and broadcast its Status; rank 0 prints it and returns its exit status,
// the other ranks print nothing and return 0 (a rank that exits non-zero first makes mpirun kill
// rank 0, whose message would be lost). A collective timeout (CTXPAR-COMM-*) cannot be agreed on:
// the lowest rank that still answers prints it and exits at once, which ends the job.
//
// Thread safety: called from the main thread only.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"

namespace ctxpar::cli {

// True inside an MPI job (Open MPI, MPICH's PMI, PMIx, Intel MPI variables).
bool UnderMpi();

// Runs `command args` on n ranks under mpirun as described above and returns the exit status.
int RunUnderMpirun(std::string_view command, int n, const std::vector<std::string>& args);

// Rank 0, about to exit on `fault`: when it says a host is unreachable (CTXPAR-RUN-004), mpirun
// is stopped at rank 0's end rather than given time to end the job. Nothing otherwise, or
// outside a launch by RunUnderMpirun.
void TellLauncherWhyRank0Ends(const Status& fault);

// Ends a rank's run as described above; returns the rank's exit status (or does not return).
int FinishRank(Communicator& world, const Status& status);

// Runs `run` on this process's rank of a tp-rank job (the MPI world under an MPI job, whose size
// must be tp; a group of one otherwise) and ends it with FinishRank; returns the exit status.
// An MPI world that cannot start is reported by ReportBeforeWorld.
int RunOnRanks(int tp, const std::function<Status(Communicator& world)>& run);

// An error found before the ranks have a communicator (the command line, the model file): every
// rank of an MPI job finds the same one, so only rank 0 (by the launcher's environment) prints
// it and returns its exit status; the others return 0. Outside MPI, ReportError.
int ReportBeforeWorld(const Status& status);

}  // namespace ctxpar::cli
