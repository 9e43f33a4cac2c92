// Plain TCP links of the CLI's own, beside MPI: rank 0's watch over the ranks of other hosts
// (rank_watch.h) and the launcher's over rank 0 (mpi_launch.h). A process's death closes its
// sockets, which the other end reads at once; that is all these links are for.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ctxpar::cli {

// Where a listener is reached: the host's IPv4 addresses (network order) and a port.
struct Contact {
  static constexpr int kMaxAddrs = 8;
  uint32_t addrs[kMaxAddrs] = {};
  int32_t count = 0;
  int32_t port = 0;
};

// A listening socket on every address and a free port (written to contact->port) with the
// host's IPv4 addresses: all but loopback, which another host would take for its own, or
// loopback alone where the host has no other; -1 when the system refuses one.
int Listen(Contact* contact);

// A connection to the first of the contact's addresses that answers within `ms` each, or -1.
int Connect(const Contact& contact, int ms);

// Reads exactly n bytes within `ms`.
bool ReadWithin(int fd, void* out, std::size_t n, int ms);

// "a.b.c.d,e.f.g.h:port", the contact as an environment variable carries it, and back.
std::string ContactText(const Contact& contact);
std::optional<Contact> ParseContact(const std::string& text);

}  // namespace ctxpar::cli
