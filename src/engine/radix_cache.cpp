#include "engine/radix_cache.h"

#include <algorithm>
#include <queue>
#include <tuple>
#include <utility>

#include "ctxpar/kv_pool.h"

namespace ctxpar::engine {

struct RadixCache::Node {
  Node* parent = nullptr;
  std::vector<int32_t> key;  // page_tokens * size() tokens
  GroupPages pages;          // [group][page of the key]
  // Children by the tokens of their first page (siblings differ there).
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
  int64_t locks = 0;
  uint64_t last_used = 0;
  uint64_t serial = 0;
  int64_t size() const { return static_cast<int64_t>(pages[0].size()); }
};

RadixCache::RadixCache(int64_t page_tokens, std::vector<int> windows)
    : page_tokens_(page_tokens),
      windows_(std::move(windows)),
      root_(std::make_unique<Node>()),
      cached_pages_(windows_.size(), 0) {
  root_->pages.resize(windows_.size());
}

RadixCache::~RadixCache() = default;

int64_t RadixCache::CommonPages(const Node& node, std::span<const int32_t> tokens) const {
  const int64_t pages =
      std::min<int64_t>(node.size(), static_cast<int64_t>(tokens.size()) / page_tokens_);
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
  head->pages.resize(windows_.size());
  for (std::size_t g = 0; g < windows_.size(); ++g) {
    head->pages[g].assign(node->pages[g].begin(), node->pages[g].begin() + pages);
    node->pages[g].erase(node->pages[g].begin(), node->pages[g].begin() + pages);
  }
  head->locks = node->locks;
  head->last_used = node->last_used;
  head->serial = next_serial_++;
  std::vector<int32_t> first(node->key.begin(), node->key.begin() + page_tokens_);
  std::unique_ptr<Node> self = std::move(parent->children.at(first));
  node->key.erase(node->key.begin(), node->key.begin() + cut);
  node->parent = head.get();
  std::vector<int32_t> rest(node->key.begin(), node->key.begin() + page_tokens_);
  head->children.emplace(std::move(rest), std::move(self));
  Node* out = head.get();
  parent->children[std::move(first)] = std::move(head);
  return out;
}

int64_t RadixCache::UsablePages(std::span<const int32_t> tokens, int64_t max_pages) const {
  const Node* node = root_.get();
  int64_t matched = 0;
  // Per window group, the held pages in a row ending at each page of the path.
  std::vector<std::vector<int64_t>> run(windows_.size());
  std::span<const int32_t> rest = tokens.first(std::min<int64_t>(
      static_cast<int64_t>(tokens.size()), std::max<int64_t>(0, max_pages) * page_tokens_));
  while (static_cast<int64_t>(rest.size()) >= page_tokens_) {
    auto it = node->children.find(std::vector<int32_t>(rest.begin(), rest.begin() + page_tokens_));
    if (it == node->children.end()) break;
    const Node* child = it->second.get();
    const int64_t common = CommonPages(*child, rest);
    for (std::size_t g = 1; g < windows_.size(); ++g) {
      if (windows_[g] == 0) continue;
      for (int64_t p = 0; p < common; ++p) {
        const int64_t before = run[g].empty() ? 0 : run[g].back();
        run[g].push_back(child->pages[g][p] == kNoPage ? 0 : before + 1);
      }
    }
    matched += common;
    if (common < child->size()) break;
    rest = rest.subspan(common * page_tokens_);
    node = child;
  }
  auto usable = [&](int64_t b) {
    for (std::size_t g = 1; g < windows_.size(); ++g) {
      if (windows_[g] == 0) continue;
      const int64_t needed = b - KvPool::FirstKept(b * page_tokens_, windows_[g], page_tokens_);
      if (needed > 0 && run[g][b - 1] < needed) return false;
    }
    return true;
  };
  while (matched > 0 && !usable(matched)) --matched;
  return matched;
}

RadixCache::Match RadixCache::MatchPrefix(std::span<const int32_t> tokens, int64_t max_pages) {
  Match m;
  m.pages.resize(windows_.size());
  Node* node = root_.get();
  std::span<const int32_t> rest = tokens.first(UsablePages(tokens, max_pages) * page_tokens_);
  while (static_cast<int64_t>(rest.size()) >= page_tokens_) {
    auto it = node->children.find(std::vector<int32_t>(rest.begin(), rest.begin() + page_tokens_));
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    const int64_t common = CommonPages(*child, rest);
    if (common < child->size()) child = Split(child, common);
    for (std::size_t g = 0; g < windows_.size(); ++g) {
      m.pages[g].insert(m.pages[g].end(), child->pages[g].begin(), child->pages[g].end());
    }
    rest = rest.subspan(common * page_tokens_);
    node = child;
  }
  Touch(node);
  m.node = node;
  return m;
}

int64_t RadixCache::PeekMatch(std::span<const int32_t> tokens, int64_t max_pages) const {
  return UsablePages(tokens, max_pages);
}

RadixCache::Node* RadixCache::Insert(std::span<const int32_t> tokens, const GroupPages& pages,
                                     std::vector<PageRef>* taken) {
  const auto n = static_cast<int64_t>(pages[0].size());
  auto take = [&](int g, int32_t page) {
    if (page == kNoPage) return false;
    taken->push_back({g, page});
    ++cached_pages_[g];
    return true;
  };
  Node* node = root_.get();
  std::span<const int32_t> rest = tokens.first(n * page_tokens_);
  for (int64_t at = 0; at < n;) {
    std::vector<int32_t> first(rest.begin(), rest.begin() + page_tokens_);
    auto it = node->children.find(first);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->parent = node;
      leaf->key.assign(rest.begin(), rest.end());
      leaf->pages.resize(windows_.size());
      for (int g = 0; g < num_groups(); ++g) {
        leaf->pages[g].assign(pages[g].begin() + at, pages[g].end());
        for (int32_t page : leaf->pages[g]) take(g, page);
      }
      leaf->serial = next_serial_++;
      evictable_pages_ += n - at;
      Node* out = leaf.get();
      node->children.emplace(std::move(first), std::move(leaf));
      Touch(out);
      return out;
    }
    Node* child = it->second.get();
    const int64_t common = CommonPages(*child, rest);
    if (common < child->size()) child = Split(child, common);
    // A window page the tree let go (or never had) is taken again from a caller that holds it.
    for (int g = 1; g < num_groups(); ++g) {
      for (int64_t p = 0; p < common; ++p) {
        int32_t& mine = child->pages[g][p];
        if (mine == kNoPage && take(g, pages[g][at + p])) mine = pages[g][at + p];
      }
    }
    rest = rest.subspan(common * page_tokens_);
    at += common;
    node = child;
  }
  Touch(node);
  return node;
}

void RadixCache::Lock(Node* node) {
  for (; node != nullptr && node != root_.get(); node = node->parent) {
    if (node->locks++ == 0) evictable_pages_ -= node->size();
  }
}

void RadixCache::Unlock(Node* node) {
  for (; node != nullptr && node != root_.get(); node = node->parent) {
    if (--node->locks == 0) evictable_pages_ += node->size();
  }
}

void RadixCache::RemoveLeaf(Node* leaf, std::vector<PageRef>* dropped) {
  for (int g = 0; g < num_groups(); ++g) {
    for (int32_t page : leaf->pages[g]) {
      if (page == kNoPage) continue;
      dropped->push_back({g, page});
      --cached_pages_[g];
    }
  }
  evictable_pages_ -= leaf->size();
  leaf->parent->children.erase(
      std::vector<int32_t>(leaf->key.begin(), leaf->key.begin() + page_tokens_));
}

int64_t RadixCache::Evict(int64_t pages, std::vector<PageRef>* dropped) {
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
    done += leaf->size();
    RemoveLeaf(leaf, dropped);
    if (parent != root_.get() && parent->children.empty() && parent->locks == 0) {
      leaves.emplace(parent->last_used, parent->serial, parent);
    }
  }
  return done;
}

int64_t RadixCache::EvictWindow(int g, int64_t pages, const std::function<bool(int32_t)>& droppable,
                                std::vector<PageRef>* dropped) {
  std::vector<std::tuple<uint64_t, uint64_t, Node*>> nodes;  // last used, serial, node
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& [first, child] : n->children) stack.push_back(child.get());
    if (n != root_.get()) nodes.emplace_back(n->last_used, n->serial, n);
  }
  std::sort(nodes.begin(), nodes.end());
  int64_t done = 0;
  for (auto& [last_used, serial, node] : nodes) {
    for (int32_t& page : node->pages[g]) {
      if (done >= pages) return done;
      if (page == kNoPage || !droppable(page)) continue;
      dropped->push_back({g, page});
      page = kNoPage;
      --cached_pages_[g];
      ++done;
    }
  }
  return done;
}

bool RadixCache::Reset(std::vector<PageRef>* dropped) {
  if (evictable_pages_ != cached_pages_[0]) return false;
  Evict(cached_pages_[0], dropped);
  return true;
}

std::vector<RadixCache::PageRef> RadixCache::AllPages() const {
  std::vector<PageRef> out;
  std::vector<const Node*> stack = {root_.get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (int g = 0; g < num_groups(); ++g) {
      for (int32_t page : n->pages[g]) {
        if (page != kNoPage) out.push_back({g, page});
      }
    }
    for (const auto& [first, child] : n->children) stack.push_back(child.get());
  }
  return out;
}

}  // namespace ctxpar::engine
