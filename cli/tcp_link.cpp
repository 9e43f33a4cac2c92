#include "tcp_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

namespace ctxpar::cli {
namespace {

int ConnectWithin(uint32_t addr, int port, int ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = addr;
  a.sin_port = htons(static_cast<uint16_t>(port));
  int err = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    pollfd p{fd, POLLOUT, 0};
    socklen_t len = sizeof(err);
    if (errno != EINPROGRESS || poll(&p, 1, ms) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
      err = -1;
    }
  }
  if (err != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

int Listen(Contact* contact) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 256) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  contact->port = ntohs(a.sin_port);
  contact->count = 0;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (bool loopback : {false, true}) {
      if (loopback && contact->count > 0) break;
      for (ifaddrs* i = list; i != nullptr && contact->count < Contact::kMaxAddrs;
           i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
        const uint32_t addr = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
        if (((ntohl(addr) >> 24) == 127) == loopback) contact->addrs[contact->count++] = addr;
      }
    }
    freeifaddrs(list);
  }
  return fd;
}

int Connect(const Contact& contact, int ms) {
  for (int i = 0; i < contact.count; ++i) {
    const int fd = ConnectWithin(contact.addrs[i], contact.port, ms);
    if (fd >= 0) return fd;
  }
  return -1;
}

bool ReadWithin(int fd, void* out, std::size_t n, int ms) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    pollfd w{fd, POLLIN, 0};
    if (poll(&w, 1, ms) != 1) return false;
    const ssize_t got = recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

std::string ContactText(const Contact& contact) {
  std::string text;
  for (int i = 0; i < contact.count; ++i) {
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &contact.addrs[i], buf, sizeof(buf));
    if (i > 0) text += ',';
    text += buf;
  }
  return text + ":" + std::to_string(contact.port);
}

std::optional<Contact> ParseContact(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  Contact c;
  try {
    c.port = std::stoi(text.substr(colon + 1));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::istringstream addrs(text.substr(0, colon));
  for (std::string a; std::getline(addrs, a, ',') && c.count < Contact::kMaxAddrs;) {
    if (inet_pton(AF_INET, a.c_str(), &c.addrs[c.count]) == 1) ++c.count;
  }
  if (c.count == 0 || c.port <= 0 || c.port > 65535) return std::nullopt;
  return c;
}

}  // namespace ctxpar::cli
