// HttpTransport: HTTP/1.1 connections for the server (internal to src/server), on Boost.Beast
// and Asio. It owns sockets, framing and deadlines; the routes (server.cpp) see whole requests.
//
// Why not cpp-httplib 0.11.4 (Debian 12's, compiled into libcpp-httplib.so): it reads each
// request of a keep-alive connection through a new stream, so bytes of a pipelined second request
// already read are dropped; it has a per-read timeout but no deadline for a whole request's
// headers, and no hook at accept, so a client trickling bytes holds a thread for as long as it
// likes; it takes the first of two conflicting Content-Length headers, ignores a
// Transfer-Encoding other than chunked, and refuses chunk trailers. Beast's parser does RFC 9112
// framing; this file adds the deadlines, the limits and the threads.
//
// Connections (one I/O thread, asynchronous: a slow or idle client holds a socket, never a
// thread):
//   - a request's headers must arrive within `timeout` of its first byte being awaited (the wait
//     between keep-alive requests included): otherwise 408 (or a silent close when nothing came);
//   - the body must make progress at least every `timeout`, and be at most max_body_bytes (413,
//     answered as soon as a Content-Length says so);
//   - at most max_connections_per_client open connections per client address (429 beyond);
//   - framing: a conflicting or invalid Content-Length, or Content-Length with Transfer-Encoding,
//     is 400; a Transfer-Encoding other than chunked is 501; chunk extensions and trailers are
//     read; Expect: 100-continue is answered; pipelined requests are answered in order.
//   Every refusal of this layer closes the connection after its answer.
// Requests: each complete request runs its handler on a thread of its own (threads end with
// their request), at most max_handlers at once (503 beyond). A handler answers once, with
// Send, or with StartStream, Write... and End; these block until written (a write that makes no
// progress for `timeout` fails) and return false once the client is gone. While a handler runs,
// the connection is watched: ClientGone() turns true when the client closes it.
//
// Thread safety: Listen, Start and Stop from one thread; the HttpResponder of a request belongs to
// its handler's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string path;  // the target without its query
  std::string body;
  HttpHeaders headers;
  // The value of header `name` (case-insensitive), "" when absent.
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  virtual bool Send(int status, std::string_view content_type, std::string body,
                    const HttpHeaders& headers = {}) = 0;
  virtual bool StartStream(std::string_view content_type, const HttpHeaders& headers) = 0;
  virtual bool Write(std::string_view data) = 0;
  virtual bool End() = 0;
  virtual bool ClientGone() const = 0;
};

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  std::chrono::milliseconds timeout{10'000};
  int max_connections_per_client = 256;
  std::size_t max_body_bytes = std::size_t{64} << 20;
  int max_handlers = 4096;
};

using HttpHandler = std::function<void(const HttpRequest& request, HttpResponder& responder)>;
// The JSON body of a refusal of this layer: its status, the request line as far as it was read
// ("" when not), and why.
using HttpRefusalBody = std::function<std::string(int status, std::string_view method,
                                                  std::string_view path, std::string_view reason)>;

class HttpTransport {
 public:
  // Binds and listens (CTXPAR-HTTP-011 when the address cannot be bound); nothing is accepted
  // before Start.
  static Expected<std::unique_ptr<HttpTransport>> Listen(HttpOptions options, HttpHandler handler,
                                                         HttpRefusalBody refusal);
  ~HttpTransport();
  int port() const;
  void Start();
  // Stops accepting, waits for the handlers running, then closes every connection.
  void Stop();

  struct Impl;  // shared with the connections (http_transport.cpp)

 private:
  explicit HttpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctxpar::server
