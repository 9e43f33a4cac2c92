#include "server/http_transport.h"

#include <fmt/format.h>
#include <sys/socket.h>

// Beast's string_view as std::string_view (Beast's own option).
#define BOOST_BEAST_USE_STD_STRING_VIEW
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "ctxpar/error_catalog.h"

namespace ctxpar::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::uint32_t kHeaderLimit = 16 * 1024;
// After a refusal the client may still be sending: its bytes are read and dropped for this long
// before the socket closes, so that a close with unread data (a reset) does not destroy the
// answer before the client reads it.
constexpr auto kLingerLimit = std::chrono::milliseconds(1000);
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

bool IsParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category();
}

}  // namespace

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (beast::iequals(key, name)) return value;
  }
  return "";
}

bool HttpRequest::HasHeader(std::string_view name) const {
  for (const auto& header : headers) {
    if (beast::iequals(header.first, name)) return true;
  }
  return false;
}

struct HttpTransport::Impl {
  HttpOptions options;
  HttpHandler handler;
  HttpRefusalBody refusal;
  std::mutex mu;
  std::condition_variable idle;
  int handlers = 0;
  std::map<std::string, int> per_client;
  // After the members sessions use: destroying the context destroys the sessions it still holds.
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::thread io_thread;
  int port = 0;

  void Accept();
};

namespace {

class Session : public std::enable_shared_from_this<Session>, public HttpResponder {
 public:
  Session(HttpTransport::Impl& t, tcp::socket socket, std::string client, bool counted)
      : t_(t),
        socket_(std::move(socket)),
        client_(std::move(client)),
        counted_(counted),
        timer_(socket_.get_executor()) {}

  ~Session() override {
    if (!counted_) return;
    std::lock_guard lock(t_.mu);
    if (--t_.per_client[client_] == 0) t_.per_client.erase(client_);
  }

  void Start() { ReadHeader(); }

  // On the I/O thread: answers `status` and closes the connection.
  void Refuse(int status, const std::string& reason) {
    keep_alive_ = false;
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(status), version_);
    res->set(http::field::content_type, "application/json");
    res->body() = t_.refusal(status, method_, path_, reason);
    res->keep_alive(false);
    res->prepare_payload();
    Arm(t_.options.timeout);
    http::async_write(socket_, *res, [self = shared_from_this(), res](beast::error_code, size_t) {
      self->Disarm();
      self->LingerClose();
    });
  }

  bool Send(int status, std::string_view content_type, std::string body,
            const HttpHeaders& headers) override {
    responded_ = true;
    if (head_) {
      auto res = std::make_shared<http::response<http::empty_body>>(
          static_cast<http::status>(status), version_);
      Fill(*res, content_type, headers);
      res->content_length(body.size());
      return OnIo([this, res](auto done) {
        http::async_write(socket_, *res, [res, done](beast::error_code ec, size_t) { done(!ec); });
      });
    }
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(status), version_);
    Fill(*res, content_type, headers);
    res->body() = std::move(body);
    res->prepare_payload();
    return OnIo([this, res](auto done) {
      http::async_write(socket_, *res, [res, done](beast::error_code ec, size_t) { done(!ec); });
    });
  }

  bool StartStream(std::string_view content_type, const HttpHeaders& headers) override {
    responded_ = true;
    stream_head_.emplace(http::status::ok, version_);
    Fill(*stream_head_, content_type, headers);
    stream_head_->chunked(true);
    stream_writer_.emplace(*stream_head_);
    return OnIo([this](auto done) {
      http::async_write_header(socket_, *stream_writer_,
                               [done](beast::error_code ec, size_t) { done(!ec); });
    });
  }

  bool Write(std::string_view data) override {
    return OnIo([this, data](auto done) {
      asio::async_write(socket_, http::make_chunk(asio::const_buffer(data.data(), data.size())),
                        [done](beast::error_code ec, size_t) { done(!ec); });
    });
  }

  bool End() override {
    return OnIo([this](auto done) {
      asio::async_write(socket_, http::make_chunk_last(),
                        [done](beast::error_code ec, size_t) { done(!ec); });
    });
  }

  bool ClientGone() const override { return gone_; }

 private:
  template <class Message>
  void Fill(Message& res, std::string_view content_type, const HttpHeaders& headers) {
    for (const auto& [name, value] : headers) res.set(name, value);
    if (!content_type.empty()) res.set(http::field::content_type, content_type);
    res.keep_alive(keep_alive_);
  }

  // A deadline for the operation in flight: when it passes, the socket's operations are
  // cancelled. The generation tells a stale expiry (of an earlier operation) from this one's.
  void Arm(std::chrono::milliseconds limit) {
    const uint64_t generation = ++deadline_generation_;
    timed_out_ = false;
    timer_.expires_after(limit);
    timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      if (ec || generation != self->deadline_generation_) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->socket_.cancel(ignored);
    });
  }
  void Disarm() {
    ++deadline_generation_;
    timer_.cancel();
  }

  // Runs start(done) on the I/O thread and waits for done(ok); a write that makes no progress
  // for the timeout fails. Called from the handler's thread.
  template <class Start>
  bool OnIo(Start start) {
    if (gone_) return false;
    std::promise<bool> written;
    std::future<bool> result = written.get_future();
    asio::post(socket_.get_executor(), [this, &start, &written] {
      Arm(t_.options.timeout);
      start([this, &written](bool ok) {
        Disarm();
        if (!ok) gone_ = true;
        written.set_value(ok);
      });
    });
    return result.get();
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(t_.options.max_body_bytes);
    method_.clear();
    path_.clear();
    Arm(t_.options.timeout);
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // Answers a failed read: a refusal when the client is owed one, else a close.
  void ReadFailed(const beast::error_code& ec, bool timed_out, std::string_view what) {
    const double seconds = t_.options.timeout.count() / 1000.0;
    if (timed_out) {
      if (!parser_->got_some()) return Close();
      return Refuse(408,
                    fmt::format("the request's {} did not arrive within {:g} s", what, seconds));
    }
    if (ec == http::error::header_limit) {
      return Refuse(431, fmt::format("the headers exceed {} KiB", kHeaderLimit / 1024));
    }
    if (ec == http::error::body_limit) {
      return Refuse(413, fmt::format("the body exceeds {} MiB", t_.options.max_body_bytes >> 20));
    }
    if (ec == http::error::bad_content_length) {
      return Refuse(
          400,
          "the Content-Length is invalid, two disagree, or it comes with Transfer-Encoding (RFC "
          "9112, 6.3)");
    }
    if (ec == http::error::bad_transfer_encoding) {
      return Refuse(400,
                    "Transfer-Encoding is given twice, or with Content-Length (RFC 9112, 6.3)");
    }
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        !IsParseError(ec)) {
      return Close();
    }
    Refuse(400, "the request is not well formed HTTP/1.1 (" + ec.message() + ")");
  }

  void OnHeader(beast::error_code ec) {
    const bool timed_out = timed_out_;
    Disarm();
    if (ec || timed_out) return ReadFailed(ec, timed_out, "headers");
    const auto& req = parser_->get();
    method_ = std::string(req.method_string());
    const std::string_view target = req.target();
    path_ = std::string(target.substr(0, target.find('?')));
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    if (req.count(http::field::transfer_encoding) > 0 && !parser_->chunked()) {
      return Refuse(501, "Transfer-Encoding: " + std::string(req[http::field::transfer_encoding]) +
                             " is not supported: send the body as is, or chunked");
    }
    if (auto expect = req.find(http::field::expect); expect != req.end()) {
      if (!beast::iequals(expect->value(), "100-continue")) {
        return Refuse(417, "Expect: " + std::string(expect->value()) + " is not supported");
      }
      if (!parser_->is_done()) {
        Arm(t_.options.timeout);
        return asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                                 [self = shared_from_this()](beast::error_code ec, size_t) {
                                   self->Disarm();
                                   if (ec) return self->Close();
                                   self->ReadBody();
                                 });
      }
    }
    if (parser_->is_done()) return Dispatch();
    ReadBody();
  }

  void ReadBody() {
    Arm(t_.options.timeout);
    http::async_read_some(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            const bool timed_out = self->timed_out_;
                            self->Disarm();
                            if (ec || timed_out) return self->ReadFailed(ec, timed_out, "body");
                            if (self->parser_->is_done()) return self->Dispatch();
                            self->ReadBody();
                          });
  }

  void Dispatch() {
    {
      std::lock_guard lock(t_.mu);
      if (t_.handlers >= t_.options.max_handlers) {
        return Refuse(503, fmt::format("{} requests are being handled, the most at once: retry",
                                       t_.handlers));
      }
      ++t_.handlers;
    }
    auto request = std::make_shared<HttpRequest>();
    http::request<http::string_body> message = parser_->release();
    request->method = method_;
    request->path = path_;
    for (const auto& field : message) {
      request->headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    request->body = std::move(message.body());
    gone_ = false;
    responded_ = false;
    // With bytes of a pipelined request already read the client is still there.
    if (buffer_.size() == 0) Watch();
    try {
      std::thread([self = shared_from_this(), request]() mutable {
        self->t_.handler(*request, *self);
        if (!self->responded_) self->Send(500, "application/json", "{}", {});
        HttpTransport::Impl& t = self->t_;
        asio::post(self->socket_.get_executor(), [self] { self->FinishRequest(); });
        self.reset();
        std::lock_guard lock(t.mu);
        --t.handlers;
        t.idle.notify_all();
      }).detach();
    } catch (const std::system_error&) {
      {
        std::lock_guard lock(t_.mu);
        --t_.handlers;
      }
      watching_ = false;
      Refuse(503, "the server cannot start a thread for the request: retry");
    }
  }

  // While a handler runs: a read-readiness wait that peeks, so that bytes of a next request stay
  // in the socket; end of stream or an error means the client left.
  void Watch() {
    watching_ = true;
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->watching_) return;
      char byte;
      const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return self->Watch();
      }
      self->watching_ = false;
      if (n <= 0) self->gone_ = true;
    });
  }

  void FinishRequest() {
    if (watching_) {
      watching_ = false;
      beast::error_code ignored;
      socket_.cancel(ignored);
    }
    stream_writer_.reset();
    stream_head_.reset();
    if (!keep_alive_ || gone_) return LingerClose();
    ReadHeader();
  }

  void LingerClose() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    Arm(kLingerLimit);
    Drain();
  }
  void Drain() {
    socket_.async_read_some(asio::buffer(drain_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->Close();
                              self->Drain();
                            });
  }
  void Close() {
    Disarm();
    beast::error_code ignored;
    socket_.close(ignored);
  }

  HttpTransport::Impl& t_;
  tcp::socket socket_;
  const std::string client_;
  const bool counted_;
  asio::steady_timer timer_;
  uint64_t deadline_generation_ = 0;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string method_, path_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_ = false;
  bool watching_ = false;
  std::atomic<bool> gone_{false};
  bool responded_ = false;  // the handler's thread
  std::optional<http::response<http::empty_body>> stream_head_;
  std::optional<http::response_serializer<http::empty_body>> stream_writer_;
  char drain_[4096];
};

}  // namespace

void HttpTransport::Impl::Accept() {
  acceptor.async_accept(io, [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      beast::error_code peer_error;
      const tcp::endpoint peer = socket.remote_endpoint(peer_error);
      const std::string client = peer_error ? "unknown" : peer.address().to_string();
      bool admitted = false;
      {
        std::lock_guard lock(mu);
        int& open = per_client[client];
        admitted = open < options.max_connections_per_client;
        if (admitted) ++open;
        if (open == 0) per_client.erase(client);
      }
      auto session = std::make_shared<Session>(*this, std::move(socket), client, admitted);
      if (admitted) {
        session->Start();
      } else {
        session->Refuse(429, fmt::format("this client has {} connections open, the most allowed "
                                         "(--max-connections-per-client)",
                                         options.max_connections_per_client));
      }
    }
    Accept();
  });
}

Expected<std::unique_ptr<HttpTransport>> HttpTransport::Listen(HttpOptions options,
                                                               HttpHandler handler,
                                                               HttpRefusalBody refusal) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  impl->refusal = std::move(refusal);
  const HttpOptions& o = impl->options;
  auto fail = [&o](const std::string& detail) {
    return CatalogError("CTXPAR-HTTP-011",
                        {{"host", o.host}, {"port", std::to_string(o.port)}, {"detail", detail}});
  };
  beast::error_code ec;
  tcp::resolver resolver(impl->io);
  const auto endpoints = resolver.resolve(
      o.host, std::to_string(o.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) return fail("the address is not local (" + ec.message() + ")");
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& acceptor = impl->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only: SO_REUSEPORT would let a second server bind a port in use.
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("the address is in use or not local (" + ec.message() + ")");
  impl->port = acceptor.local_endpoint().port();
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(impl)));
}

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpTransport::~HttpTransport() { Stop(); }

int HttpTransport::port() const { return impl_->port; }

void HttpTransport::Start() {
  Impl& t = *impl_;
  t.Accept();
  t.io_thread = std::thread([&t] { t.io.run(); });
}

void HttpTransport::Stop() {
  Impl& t = *impl_;
  if (!t.io_thread.joinable()) return;
  asio::post(t.io, [&t] {
    beast::error_code ignored;
    t.acceptor.close(ignored);
  });
  {
    std::unique_lock lock(t.mu);
    t.idle.wait(lock, [&t] { return t.handlers == 0; });
  }
  t.io.stop();
  t.io_thread.join();
}

}  // namespace ctxpar::server
