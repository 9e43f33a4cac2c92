// Stopping a run on SIGINT / SIGTERM: the first signal asks the run to stop after the token in
// progress, so that it ends its output line, reports the interruption (CTXPAR-RUN-001) and exits
// 130 / 143 like a shell would; a second one exits at once.
//
// Ranks started by the self-launch (mpi_launch.h) receive the launcher's SIGINT / SIGTERM as
// SIGUSR1 / SIGUSR2 (mpirun forwards those two to every rank; it would kill the job on the
// others), and read them as SIGINT / SIGTERM. A rank must not leave the loop alone (the others
// would wait for it in the next collective), so the loop asks AgreeOnStop once per token.
//
// Usage, in a generation loop run by every rank:
//   InstallStopHandlers(UnderMpi());
//   while (...) {
//     CTXPAR_ASSIGN_OR_RETURN(const int stop, AgreeOnStop(world));
//     if (stop != 0) return Interrupted(stop, generated);  // after ending the output line
//     ...
//   }
#pragma once

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"

namespace ctxpar::cli {

// SIGINT, SIGTERM, SIGUSR1 and SIGUSR2 set the stop request; a second SIGINT or SIGTERM exits
// 128 + signal at once. Alone, the process first ends the line on stdout and says so on stderr;
// in an MPI job (`in_mpi_job`) it exits quietly: the second signal comes from mpirun ending the
// job, and the launcher (or rank 0) speaks for the job.
void InstallStopHandlers(bool in_mpi_job);

// The signal (SIGINT or SIGTERM) that asked this process to stop, 0 when none.
int StopRequested();

// Collective over `world` (one all-reduce of one int): the stop signal of any rank, the same on
// every rank; 0 when no rank was asked to stop.
Expected<int> AgreeOnStop(Communicator& world);

// CTXPAR-RUN-001: interrupted by `signal` after `tokens` generated tokens.
Status Interrupted(int signal, int tokens);

// 128 + the signal of an Interrupted status (130 for SIGINT, 143 for SIGTERM), else 0.
int InterruptedExitStatus(const Status& status);

}  // namespace ctxpar::cli
