#include "engine/radix_cache.h"

#include <algorithm>
#include <queue>
#include <tuple>
#include <utility>

namespace ctxpar::engine {

struct RadixCache::Node {
  Node* parent = nullptr;
  std::vector<int32_t> key;    // page_tokens * pages.size() tokens
  std::vector<int32_t> pages;  // one per page of the key
  // Children by the tokens of their first page (siblings differ there).
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
  int64_t locks = 0;
  uint64_t last_used = 0;
  uint64_t serial = 0;
};

RadixCache::RadixCache(int64_t page_tokens)
    : page_tokens_(page_tokens), root_(std::make_unique<Node>()) {}

RadixCache::~RadixCache() = default;

int64_t RadixCache::CommonPages(const Node& node, std::span<const int32_t> tokens) const {
  const int64_t pages = std::min<int64_t>(static_cast<int64_t>(node.pages.size()),
                                          static_cast<int64_t>(tokens.size()) / page_tokens_);
  for (int64_t p = 0; p < pages; ++p) {
    const auto at = node.key.begin() + p * page_tokens_;
    if (!std::equal(at, at + page_tokens_, tokens.begin() + p * page_tokens_)) return p;
  }
  return pages;
}

void RadixCache::Touch(Node* node) {
  const uint64_t now = ++clock_;
  for (; node != nullptr; node = node->parent) node->last_used = now;
}

// `node` keeps its last pages; a new parent takes the first `pages` (and the node's locks, which
// its locked descendants and itself imply on every ancestor).
RadixCache::Node* RadixCache::Split(Node* node, int64_t pages) {
  Node* parent = node->parent;
  const int64_t cut = pages * page_tokens_;
  auto head = std::make_unique<Node>();
  head->parent = parent;
  head->key.assign(node->key.begin(), node->key.begin() + cut);
  head->pages.assign(node->pages.begin(), node->pages.begin() + pages);
  head->locks = node->locks;
  head->last_used = node->last_used;
  head->serial = next_serial_++;
  std::vector<int32_t> first(node->key.begin(), node->key.begin() + page_tokens_);
  std::unique_ptr<Node> self = std::move(parent->children.at(first));
  node->key.erase(node->key.begin(), node->key.begin() + cut);
  node->pages.erase(node->pages.begin(), node->pages.begin() + pages);
  node->parent = head.get();
  std::vector<int32_t> rest(node->key.begin(), node->key.begin() + page_tokens_);
  head->children.emplace(std::move(rest), std::move(self));
  Node* out = head.get();
  parent->children[std::move(first)] = std::move(head);
  return out;
}

RadixCache::Match RadixCache::MatchPrefix(std::span<const int32_t> tokens, int64_t max_pages) {
  Match m;
  Node* node = root_.get();
  std::span<const int32_t> rest = tokens.first(std::min<int64_t>(
      static_cast<int64_t>(tokens.size()), std::max<int64_t>(0, max_pages) * page_tokens_));
  while (static_cast<int64_t>(rest.size()) >= page_tokens_) {
    auto it = node->children.find(std::vector<int32_t>(rest.begin(), rest.begin() + page_tokens_));
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    const int64_t common = CommonPages(*child, rest);
    if (common < static_cast<int64_t>(child->pages.size())) child = Split(child, common);
    m.pages.insert(m.pages.end(), child->pages.begin(), child->pages.end());
    rest = rest.subspan(common * page_tokens_);
    node = child;
  }
  Touch(node);
  m.node = node;
  return m;
}

int64_t RadixCache::PeekMatch(std::span<const int32_t> tokens, int64_t max_pages) const {
  const Node* node = root_.get();
  int64_t matched = 0;
  std::span<const int32_t> rest = tokens.first(std::min<int64_t>(
      static_cast<int64_t>(tokens.size()), std::max<int64_t>(0, max_pages) * page_tokens_));
  while (static_cast<int64_t>(rest.size()) >= page_tokens_) {
    auto it = node->children.find(std::vector<int32_t>(rest.begin(), rest.begin() + page_tokens_));
    if (it == node->children.end()) break;
    const int64_t common = CommonPages(*it->second, rest);
    matched += common;
    if (common < static_cast<int64_t>(it->second->pages.size())) break;
    rest = rest.subspan(common * page_tokens_);
    node = it->second.get();
  }
  return matched;
}

RadixCache::Node* RadixCache::Insert(std::span<const int32_t> tokens,
                                     std::span<const int32_t> pages, std::vector<int32_t>* taken) {
  Node* node = root_.get();
  std::span<const int32_t> rest = tokens.first(pages.size() * page_tokens_);
  while (!pages.empty()) {
    std::vector<int32_t> first(rest.begin(), rest.begin() + page_tokens_);
    auto it = node->children.find(first);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->parent = node;
      leaf->key.assign(rest.begin(), rest.end());
      leaf->pages.assign(pages.begin(), pages.end());
      leaf->serial = next_serial_++;
      taken->insert(taken->end(), pages.begin(), pages.end());
      cached_pages_ += static_cast<int64_t>(pages.size());
      evictable_pages_ += static_cast<int64_t>(pages.size());
      Node* out = leaf.get();
      node->children.emplace(std::move(first), std::move(leaf));
      Touch(out);
      return out;
    }
    Node* child = it->second.get();
    const int64_t common = CommonPages(*child, rest);
    if (common < static_cast<int64_t>(child->pages.size())) child = Split(child, common);
    rest = rest.subspan(common * page_tokens_);
    pages = pages.subspan(common);
    node = child;
  }
  Touch(node);
  return node;
}

void RadixCache::Lock(Node* node) {
  for (; node != nullptr && node != root_.get(); node = node->parent) {
    if (node->locks++ == 0) evictable_pages_ -= static_cast<int64_t>(node->pages.size());
  }
}

void RadixCache::Unlock(Node* node) {
  for (; node != nullptr && node != root_.get(); node = node->parent) {
    if (--node->locks == 0) evictable_pages_ += static_cast<int64_t>(node->pages.size());
  }
}

int64_t RadixCache::Evict(int64_t pages, std::vector<int32_t>* dropped) {
  using Entry = std::tuple<uint64_t, uint64_t, Node*>;  // last used, serial, node
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& [first, child] : n->children) stack.push_back(child.get());
    if (n != root_.get() && n->children.empty() && n->locks == 0) {
      leaves.emplace(n->last_used, n->serial, n);
    }
  }
  int64_t done = 0;
  while (done < pages && !leaves.empty()) {
    Node* leaf = std::get<2>(leaves.top());
    leaves.pop();
    Node* parent = leaf->parent;
    const auto n = static_cast<int64_t>(leaf->pages.size());
    dropped->insert(dropped->end(), leaf->pages.begin(), leaf->pages.end());
    done += n;
    cached_pages_ -= n;
    evictable_pages_ -= n;
    parent->children.erase(
        std::vector<int32_t>(leaf->key.begin(), leaf->key.begin() + page_tokens_));
    if (parent != root_.get() && parent->children.empty() && parent->locks == 0) {
      leaves.emplace(parent->last_used, parent->serial, parent);
    }
  }
  return done;
}

bool RadixCache::Reset(std::vector<int32_t>* dropped) {
  if (evictable_pages_ != cached_pages_) return false;
  Evict(cached_pages_, dropped);
  return true;
}

std::vector<int32_t> RadixCache::AllPages() const {
  std::vector<int32_t> out;
  std::vector<const Node*> stack = {root_.get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    out.insert(out.end(), n->pages.begin(), n->pages.end());
    for (const auto& [first, child] : n->children) stack.push_back(child.get());
  }
  return out;
}

}  // namespace ctxpar::engine
