// `ctxpar generate` over MPI ranks as a user meets it: an error is printed once by rank 0 with
// its catalog ID and mpirun adds nothing; SIGINT / SIGTERM stop the job at a token boundary with
// a message, an ended line and exit 130 / 143, twice as well, leaving no shared-memory segment;
// a stopped rank ends the job after CTXPAR_COLLECTIVE_TIMEOUT with the rank named.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A running `ctxpar generate ...` with its stdout on a pipe and its stderr in a file.
class Generate {
 public:
  Generate(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv_store = {CTXPAR_BIN, "generate"};
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_store) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_store = {"OMPI_ALLOW_RUN_AS_ROOT=1",
                                          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                          "OMPI_MCA_rmaps_base_oversubscribe=1"};
    for (char** e = environ; *e != nullptr; ++e) env_store.emplace_back(*e);
    env_store.insert(env_store.end(), env.begin(), env.end());
    std::vector<char*> envp;
    for (std::string& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    err_path_ = ::testing::TempDir() + "launch_test_err_" + std::to_string(getpid()) + "_" +
                std::to_string(++count_);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    out_fd_ = out[0];
  }
  ~Generate() {
    if (out_fd_ >= 0) close(out_fd_);
    std::remove(err_path_.c_str());
  }

  // Reads stdout until it holds `bytes` bytes (or ends); false when it ended first.
  bool WaitForOutput(size_t bytes) {
    while (out_.size() < bytes) {
      if (!ReadSome(-1)) return false;
    }
    return true;
  }
  // The pids of the ranks: children of mpirun, the child of this process.
  std::vector<pid_t> Ranks() const {
    std::vector<pid_t> ranks;
    const pid_t mpirun = OnlyChildOf(pid_);
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::istringstream stat(ReadFile(e.path() / "stat"));
      std::string pid, comm, state;
      pid_t ppid = 0;
      stat >> pid >> comm >> state >> ppid;
      if (ppid == mpirun) ranks.push_back(std::stoi(pid));
    }
    return ranks;
  }
  void Signal(int sig) { kill(pid_, sig); }
  // Waits for the exit; returns the exit status (128 + signal when killed).
  int Wait() {
    while (ReadSome(-1)) {
    }
    int status = 0;
    waitpid(pid_, &status, 0);
    end_ = Clock::now();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const std::string& out() const { return out_; }
  std::string err() const { return ReadFile(err_path_); }
  Clock::time_point end() const { return end_; }

 private:
  static pid_t OnlyChildOf(pid_t parent) {
    std::istringstream children(ReadFile("/proc/" + std::to_string(parent) + "/task/" +
                                         std::to_string(parent) + "/children"));
    pid_t child = -1;
    children >> child;
    return child;
  }
  bool ReadSome(int timeout_ms) {
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return false;
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }

  static inline int count_ = 0;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string err_path_;
  std::string out_;
  Clock::time_point end_;
};

// The shared-memory segments the ranks have mapped (Open MPI's vader segments, shm_a2a windows).
std::set<std::string> SharedSegments(const std::vector<pid_t>& ranks) {
  std::set<std::string> files;
  for (pid_t r : ranks) {
    std::istringstream maps(ReadFile("/proc/" + std::to_string(r) + "/maps"));
    for (std::string line; std::getline(maps, line);) {
      const size_t at = line.find("/dev/shm/");
      if (at != std::string::npos) files.insert(line.substr(at));
    }
  }
  return files;
}

bool Skip() {
  return std::string(CTXPAR_MPIEXEC).empty() || std::getenv("CTXPAR_MODEL") == nullptr;
}

// What rank 0 printed after the engine's two capacity lines (SGLang's "KV Cache is allocated."
// and "max_total_num_tokens=..."), which every run prints first; a missing line fails the test.
std::string AfterCapacityLog(const std::string& err) {
  size_t at = 0;
  for (const char* prefix : {"KV Cache is allocated. #tokens: ", "max_total_num_tokens="}) {
    EXPECT_EQ(err.compare(at, std::strlen(prefix), prefix), 0) << err;
    const size_t eol = err.find('\n', at);
    if (eol == std::string::npos) return err;
    at = eol + 1;
  }
  return err.substr(at);
}

const std::vector<std::string> kLongRun = {
    "--tp-size",        "3",   "--dcp-size",   "3",
    "--max-new-tokens", "400", "--ignore-eos", "Tell me a long story about a lighthouse"};

// An interruption: after the first output, `signals` (one or two) reach the launcher.
void ExpectInterrupted(const std::vector<int>& signals, int exit_status, const char* name) {
  Generate g(kLongRun);
  ASSERT_TRUE(g.WaitForOutput(8)) << g.err();
  const std::set<std::string> segments = SharedSegments(g.Ranks());
  EXPECT_FALSE(segments.empty()) << "no shared memory found to check";
  const Clock::time_point t0 = Clock::now();
  for (int sig : signals) {
    g.Signal(sig);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(g.Wait(), exit_status) << g.err();
  EXPECT_LT(std::chrono::duration<double>(g.end() - t0).count(), 5.0);
  EXPECT_TRUE(g.out().ends_with("\n")) << g.out();
  const std::string err = AfterCapacityLog(g.err());
  EXPECT_TRUE(err.starts_with(std::string("Interrupted by ") + name + " after ")) << err;
  EXPECT_TRUE(err.ends_with(" generated tokens.\nrun: ctxpar explain CTXPAR-RUN-001\n")) << err;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (const std::string& f : segments) EXPECT_FALSE(std::filesystem::exists(f)) << f;
}

TEST(Launch, SigintStopsTheRanksAtATokenAndExits130) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  ExpectInterrupted({SIGINT}, 130, "SIGINT");
}

TEST(Launch, SigtermExits143) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  ExpectInterrupted({SIGTERM}, 143, "SIGTERM");
}

TEST(Launch, TwoSigintsLeaveNoSharedMemoryBehind) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  ExpectInterrupted({SIGINT, SIGINT}, 130, "SIGINT");
}

pid_t RankPid(const Generate& g, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0';
  for (pid_t r : g.Ranks()) {
    if (ReadFile("/proc/" + std::to_string(r) + "/environ").find(want) != std::string::npos) {
      return r;
    }
  }
  return -1;
}

// A job that cannot stop at a token (rank 1 is stopped): the second SIGINT ends it within a
// second's grace, and the launcher, not rank 0, says so.
TEST(Launch, TwoSigintsEndAJobThatCannotStop) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  Generate g(kLongRun);
  ASSERT_TRUE(g.WaitForOutput(8)) << g.err();
  const std::set<std::string> segments = SharedSegments(g.Ranks());
  const pid_t rank1 = RankPid(g, 1);
  ASSERT_GT(rank1, 0);
  kill(rank1, SIGSTOP);
  const Clock::time_point t0 = Clock::now();
  g.Signal(SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  g.Signal(SIGINT);
  EXPECT_EQ(g.Wait(), 130) << g.err();
  EXPECT_LT(std::chrono::duration<double>(g.end() - t0).count(), 8.0);
  EXPECT_TRUE(g.out().ends_with("\n"));
  EXPECT_EQ(AfterCapacityLog(g.err()),
            "ctxpar generate: interrupted twice by SIGINT: the ranks were stopped at once\n");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (const std::string& f : segments) EXPECT_FALSE(std::filesystem::exists(f)) << f;
}

// The launcher killed outright (SIGKILL, which it cannot forward): mpirun and the ranks end
// with it instead of running the job to its end under init.
TEST(Launch, AKilledLauncherTakesTheJobWithIt) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  Generate g(kLongRun);
  ASSERT_TRUE(g.WaitForOutput(8)) << g.err();
  const std::vector<pid_t> ranks = g.Ranks();
  ASSERT_EQ(ranks.size(), 3u);
  g.Signal(SIGKILL);
  EXPECT_EQ(g.Wait(), 128 + SIGKILL);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  auto alive = [&] {
    return std::count_if(ranks.begin(), ranks.end(), [](pid_t r) {
      // A zombie waits for init to reap it: it runs no more.
      const std::string stat = ReadFile("/proc/" + std::to_string(r) + "/stat");
      return !stat.empty() && stat.find(") Z ") == std::string::npos;
    });
  };
  while (alive() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(alive(), 0) << "ranks still running 10 s after the launcher was killed";
}

// One process (tp 1): the same stop, and a second SIGINT exits at once.
TEST(Launch, OneProcessStopsOnSigint) {
  if (std::getenv("CTXPAR_MODEL") == nullptr) GTEST_SKIP() << "needs CTXPAR_MODEL";
  Generate g({"--max-new-tokens", "400", "--ignore-eos", "Tell me a long story"});
  ASSERT_TRUE(g.WaitForOutput(8)) << g.err();
  g.Signal(SIGINT);
  EXPECT_EQ(g.Wait(), 130) << g.err();
  EXPECT_TRUE(g.out().ends_with("\n"));
  EXPECT_TRUE(AfterCapacityLog(g.err()).starts_with("Interrupted by SIGINT after ")) << g.err();
}

// A rank-side error of every rank (the tokenizer of a damaged copy of the model, which the
// launcher's own checks do not read) is printed once, by rank 0, with nothing from mpirun, and
// the exit status is the error's.
TEST(Launch, AnErrorOfEveryRankIsPrintedOnce) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  std::ifstream in(std::getenv("CTXPAR_MODEL"), std::ios::binary | std::ios::ate);
  std::vector<char> bytes(static_cast<size_t>(in.tellg()));
  in.seekg(0).read(bytes.data(), std::streamsize(bytes.size()));
  // tokenizer.ggml.pre's value (after the key, its u32 type and u64 length) names no
  // pre-tokenizer.
  const std::string key = "tokenizer.ggml.pre";
  auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(it, bytes.end());
  std::memcpy(&*(it + key.size() + 12), "nopre!", 6);
  const std::string path = ::testing::TempDir() + "badpre_" + std::to_string(getpid()) + ".gguf";
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  Generate g({"--tp-size", "3", "--dcp-size", "3", "--model-path", path, "Hello"});
  const int status = g.Wait();
  std::remove(path.c_str());
  EXPECT_EQ(status, 2);
  const std::string err = g.err();
  EXPECT_TRUE(
      err.starts_with("The model file '" + path + "' holds a tokenizer that ctxpar cannot use: "))
      << err;
  EXPECT_TRUE(err.ends_with("\nrun: ctxpar explain CTXPAR-GGUF-008\n")) << err;
  EXPECT_EQ(err.find("CTXPAR-GGUF-008"), err.rfind("CTXPAR-GGUF-008")) << "printed twice:\n" << err;
  EXPECT_EQ(err.find("---"), std::string::npos) << "mpirun's boilerplate:\n" << err;
  EXPECT_TRUE(g.out().empty()) << g.out();
}

// Ranks started by the user's mpirun find a bad configuration before MPI starts: rank 0 alone
// prints it, and the job's exit status is the error's.
TEST(Launch, UnderTheUsersMpirunAConfigurationErrorIsPrintedOnce) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  const std::string err_path =
      ::testing::TempDir() + "launch_user_mpirun_" + std::to_string(getpid());
  const std::string cmd = std::string(
                              "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                              "OMPI_MCA_rmaps_base_oversubscribe=1 ") +
                          CTXPAR_MPIEXEC + " --quiet -np 3 " + CTXPAR_BIN +
                          " generate --tp-size 2 --dcp-size 2 Hello 2>" + err_path;
  const int status = std::system(cmd.c_str());
  const std::string err = ReadFile(err_path);
  std::remove(err_path.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2) << err;
  EXPECT_EQ(err,
            "num_heads (9) must be divisible by dcp_size (2)\nrun: ctxpar explain "
            "CTXPAR-LAYOUT-003\n");
}

TEST(Launch, ALauncherThatCannotRunIsNamed) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  Generate g({"--tp-size", "3", "--dcp-size", "3", "Hello"}, {"CTXPAR_MPIRUN=/nonexistent/mpirun"});
  EXPECT_EQ(g.Wait(), 1);
  EXPECT_EQ(g.err(),
            "Cannot run '/nonexistent/mpirun' to start 3 ranks: No such file or directory; a run "
            "over several ranks needs Open MPI (apt-get install -y openmpi-bin), or CTXPAR_MPIRUN "
            "naming its mpirun.\nrun: ctxpar explain CTXPAR-RUN-002\n");
}

// A rank stopped with SIGSTOP: the others give up after the deadline and the job ends, naming it.
TEST(Launch, AStoppedRankEndsTheJobAfterTheDeadline) {
  if (Skip()) GTEST_SKIP() << "needs MPI and CTXPAR_MODEL";
  Generate g(kLongRun, {"CTXPAR_COLLECTIVE_TIMEOUT=2"});
  ASSERT_TRUE(g.WaitForOutput(8)) << g.err();
  const pid_t rank1 = RankPid(g, 1);
  ASSERT_GT(rank1, 0);
  const std::set<std::string> segments = SharedSegments(g.Ranks());
  const Clock::time_point t0 = Clock::now();
  kill(rank1, SIGSTOP);
  EXPECT_EQ(g.Wait(), 1) << g.err();
  EXPECT_LT(std::chrono::duration<double>(g.end() - t0).count(), 15.0);
  const std::string err = g.err();
  EXPECT_NE(err.find(" for rank 1 of 3, which did not answer; the job stops"), std::string::npos)
      << err;
  EXPECT_TRUE(err.ends_with("run: ctxpar explain CTXPAR-COMM-001\n")) << err;
  EXPECT_EQ(err.find("CTXPAR-COMM-001"), err.rfind("CTXPAR-COMM-001")) << err;
  kill(rank1, SIGKILL);  // in case mpirun had not yet
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (const std::string& f : segments) EXPECT_FALSE(std::filesystem::exists(f)) << f;
}

}  // namespace
