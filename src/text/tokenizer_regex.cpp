#include "text/tokenizer_regex.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <tuple>
#include <utility>

namespace ctxpar::tokenizer_internal {
namespace {

using Inst = CodepointRegex::Inst;
using Op = CodepointRegex::Op;
using CharClass = CodepointRegex::CharClass;

struct Node {
  enum Kind { kChar, kConcat, kAlt, kRepeat, kLookahead, kEnd } kind;
  int32_t char_class = 0;  // kChar
  int min = 0, max = 0;    // kRepeat; max -1: unbounded
  bool negate = false;     // kLookahead
  std::vector<std::unique_ptr<Node>> children{};
};

class Parser {
 public:
  Parser(std::string_view pattern, std::vector<CharClass>* classes)
      : pattern_(pattern), classes_(classes) {}

  Expected<std::unique_ptr<Node>> Parse() {
    CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Node> node, Alternation());
    if (pos_ < pattern_.size()) return Error("unbalanced ')'");
    return node;
  }

 private:
  Status Error(std::string_view what) const {
    return InvalidArgument(
        fmt::format("pre-tokenizer regex '{}': {} at offset {}", pattern_, what, pos_));
  }
  bool Done() const { return pos_ >= pattern_.size(); }
  char Peek() const { return pattern_[pos_]; }

  uint32_t NextCodepoint() { return tokenizer_internal::NextCodepoint(pattern_, &pos_); }

  Expected<std::unique_ptr<Node>> Alternation() {
    auto alt = std::make_unique<Node>(Node{Node::kAlt});
    while (true) {
      CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Node> branch, Concatenation());
      alt->children.push_back(std::move(branch));
      if (Done() || Peek() != '|') break;
      ++pos_;
    }
    if (alt->children.size() == 1) return std::move(alt->children[0]);
    return alt;
  }

  Expected<std::unique_ptr<Node>> Concatenation() {
    auto concat = std::make_unique<Node>(Node{Node::kConcat});
    while (!Done() && Peek() != '|' && Peek() != ')') {
      CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Node> atom, Atom());
      CTXPAR_ASSIGN_OR_RETURN(atom, Quantified(std::move(atom)));
      concat->children.push_back(std::move(atom));
    }
    return concat;
  }

  Expected<std::unique_ptr<Node>> Quantified(std::unique_ptr<Node> atom) {
    while (!Done()) {
      int min = 0, max = 0;
      const char c = Peek();
      if (c == '?') {
        max = 1;
      } else if (c == '*') {
        max = -1;
      } else if (c == '+') {
        min = 1;
        max = -1;
      } else if (c == '{') {
        const size_t close = pattern_.find('}', pos_);
        if (close == std::string_view::npos) return Error("unclosed '{'");
        const std::string_view body = pattern_.substr(pos_ + 1, close - pos_ - 1);
        const size_t comma = body.find(',');
        if (std::sscanf(std::string(body.substr(0, comma)).c_str(), "%d", &min) != 1) {
          return Error("a bad repeat count");
        }
        max = min;
        if (comma != std::string_view::npos &&
            std::sscanf(std::string(body.substr(comma + 1)).c_str(), "%d", &max) != 1) {
          return Error("a bad repeat count");
        }
        if (min < 0 || max < min || max > 16) return Error("a repeat count outside [0, 16]");
        pos_ = close;
      } else {
        break;
      }
      ++pos_;
      if (!Done() && Peek() == '?') return Error("a lazy quantifier");
      auto repeat = std::make_unique<Node>(Node{Node::kRepeat});
      repeat->min = min;
      repeat->max = max;
      repeat->children.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  std::unique_ptr<Node> CharNode(CharClass cls) {
    auto node = std::make_unique<Node>(Node{Node::kChar});
    node->char_class = static_cast<int32_t>(classes_->size());
    classes_->push_back(std::move(cls));
    return node;
  }

  Expected<std::unique_ptr<Node>> Atom() {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      std::unique_ptr<Node> look;
      if (pattern_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (pattern_.substr(pos_, 2) == "?=" || pattern_.substr(pos_, 2) == "?!") {
        look = std::make_unique<Node>(Node{Node::kLookahead});
        look->negate = pattern_[pos_ + 1] == '!';
        pos_ += 2;
      } else if (!Done() && Peek() == '?') {
        return Error("an unsupported group");
      }
      CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Node> inner, Alternation());
      if (Done() || Peek() != ')') return Error("unclosed '('");
      ++pos_;
      if (look == nullptr) return inner;
      look->children.push_back(std::move(inner));
      return look;
    }
    if (c == '[') return Bracket();
    if (c == '$') {
      ++pos_;
      return std::make_unique<Node>(Node{Node::kEnd});
    }
    if (c == ')' || c == '*' || c == '+' || c == '?' || c == '{' || c == '^' || c == '.') {
      return Error(fmt::format("an unsupported '{}'", c));
    }
    CharClass cls;
    if (c == '\\') {
      CTXPAR_RETURN_IF_ERROR(Escape(&cls));
    } else {
      const uint32_t cp = NextCodepoint();
      cls.ranges.emplace_back(cp, cp);
    }
    return CharNode(std::move(cls));
  }

  // An escape at pos_ ('\'), added to `cls`: a class (\s \S \p{..}) or one codepoint, which is
  // also returned through *literal (else -1).
  Status Escape(CharClass* cls, int64_t* literal = nullptr) {
    ++pos_;
    if (Done()) return Error("a trailing '\\'");
    const char c = Peek();
    if (literal != nullptr) *literal = -1;
    const auto add = [&](uint32_t cp) {
      cls->ranges.emplace_back(cp, cp);
      if (literal != nullptr) *literal = cp;
    };
    if (c == 's') {
      cls->class_bits |= 1u << kWhitespace;
    } else if (c == 'S') {
      cls->not_space = true;
    } else if (c == 'r') {
      add('\r');
    } else if (c == 'n') {
      add('\n');
    } else if (c == 't') {
      add('\t');
    } else if (c == 'p') {
      const size_t close = pattern_.find('}', pos_);
      if (pattern_.substr(pos_, 2) != "p{" || close == std::string_view::npos) {
        return Error("a bad \\p{..}");
      }
      const std::string_view name = pattern_.substr(pos_ + 2, close - pos_ - 2);
      CodepointClass k;
      if (name == "L" || name == "Lu" || name == "Ll" || name == "Lt" || name == "Lm" ||
          name == "Lo") {
        k = kLetter;
      } else if (name == "N") {
        k = kNumber;
      } else if (name == "P") {
        k = kPunctuation;
      } else if (name == "S") {
        k = kSymbol;
      } else if (name == "M") {
        k = kMark;
      } else {
        return Error(fmt::format("an unsupported class \\p{{{}}}", name));
      }
      cls->class_bits |= 1u << k;
      pos_ = close;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      return Error(fmt::format("an unsupported escape '\\{}'", c));
    } else {
      add(static_cast<uint8_t>(c));
    }
    ++pos_;
    return Status::Ok();
  }

  Expected<std::unique_ptr<Node>> Bracket() {
    ++pos_;
    CharClass cls;
    if (!Done() && Peek() == '^') {
      cls.negate = true;
      ++pos_;
    }
    while (!Done() && Peek() != ']') {
      int64_t lo;
      if (Peek() == '\\') {
        CTXPAR_RETURN_IF_ERROR(Escape(&cls, &lo));
        if (lo < 0) continue;  // a class
        cls.ranges.pop_back();
      } else {
        lo = NextCodepoint();
      }
      int64_t hi = lo;
      if (pos_ + 1 < pattern_.size() && Peek() == '-' && pattern_[pos_ + 1] != ']') {
        ++pos_;
        if (Peek() == '\\') {
          CharClass scratch;
          CTXPAR_RETURN_IF_ERROR(Escape(&scratch, &hi));
          if (hi < 0) return Error("a class as a range's end");
        } else {
          hi = NextCodepoint();
        }
        if (hi < lo) return Error("a reversed range");
      }
      cls.ranges.emplace_back(static_cast<uint32_t>(lo), static_cast<uint32_t>(hi));
    }
    if (Done()) return Error("unclosed '['");
    ++pos_;
    return CharNode(std::move(cls));
  }

  std::string_view pattern_;
  size_t pos_ = 0;
  std::vector<CharClass>* classes_;
};

class Emitter {
 public:
  explicit Emitter(std::vector<Inst>* program) : program_(program) {}

  void Emit(const Node& node) {
    switch (node.kind) {
      case Node::kChar:
        Add({Op::kChar, false, node.char_class});
        break;
      case Node::kConcat:
        for (const auto& child : node.children) Emit(*child);
        break;
      case Node::kAlt: {
        std::vector<size_t> jumps;
        for (size_t i = 0; i + 1 < node.children.size(); ++i) {
          const size_t split = Add({Op::kSplit, false, Here() + 1});
          Emit(*node.children[i]);
          jumps.push_back(Add({Op::kJump}));
          (*program_)[split].y = Here();
        }
        Emit(*node.children.back());
        for (size_t j : jumps) (*program_)[j].x = Here();
        break;
      }
      case Node::kRepeat: {
        const Node& body = *node.children[0];
        for (int i = 0; i < node.min; ++i) Emit(body);
        if (node.max < 0) {
          const int32_t loop = Here();
          const size_t split = Add({Op::kSplit, false, loop + 1});
          Emit(body);
          Add({Op::kJump, false, loop});
          (*program_)[split].y = Here();
        } else {
          // Nested optionals: each further copy is tried first, and all skip to the end.
          std::vector<size_t> splits;
          for (int i = node.min; i < node.max; ++i) {
            splits.push_back(Add({Op::kSplit, false, Here() + 1}));
            Emit(body);
          }
          for (size_t s : splits) (*program_)[s].y = Here();
        }
        break;
      }
      case Node::kLookahead: {
        const size_t look = Add({Op::kLookahead, node.negate});
        Emit(*node.children[0]);
        Add({Op::kMatch});
        (*program_)[look].x = Here();
        break;
      }
      case Node::kEnd:
        Add({Op::kEnd});
        break;
    }
  }

 private:
  int32_t Here() const { return static_cast<int32_t>(program_->size()); }
  size_t Add(Inst inst) {
    program_->push_back(inst);
    return program_->size() - 1;
  }
  std::vector<Inst>* program_;
};

// llama.cpp matches a regex's literals and ranges against the text with every non-ASCII
// whitespace codepoint replaced by U+000B (and, for regexes with \p{..}, every other non-ASCII
// codepoint by a byte above 0xCF that no ASCII range holds).
uint32_t ComparedCodepoint(uint32_t cp, CodepointClass cls) {
  return cp >= 0x80 && cls == kWhitespace ? 0x0B : cp;
}

bool Matches(const CharClass& c, uint32_t cp, CodepointClass cls) {
  bool in = ((c.class_bits >> cls) & 1) != 0 || (c.not_space && cls != kWhitespace);
  if (!in) {
    const uint32_t v = ComparedCodepoint(cp, cls);
    for (const auto& [lo, hi] : c.ranges) {
      if (v >= lo && v <= hi) {
        in = true;
        break;
      }
    }
  }
  return in != c.negate;
}

}  // namespace

Expected<CodepointRegex> CodepointRegex::Compile(std::string_view pattern) {
  CodepointRegex regex;
  Parser parser(pattern, &regex.classes_);
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Node> root, parser.Parse());
  Emitter(&regex.program_).Emit(*root);
  regex.program_.push_back({Op::kMatch});
  return regex;
}

int64_t CodepointRegex::MatchAt(int32_t pc, const std::vector<uint32_t>& cps,
                                const std::vector<CodepointClass>& classes, size_t pos,
                                size_t end) const {
  const size_t start = pos;
  std::vector<std::pair<int32_t, size_t>> backtrack;
  while (true) {
    const Inst& inst = program_[pc];
    bool fail = false;
    switch (inst.op) {
      case Op::kChar:
        if (pos < end && Matches(classes_[inst.x], cps[pos], classes[pos])) {
          ++pc;
          ++pos;
        } else {
          fail = true;
        }
        break;
      case Op::kSplit:
        backtrack.emplace_back(inst.y, pos);
        pc = inst.x;
        break;
      case Op::kJump:
        pc = inst.x;
        break;
      case Op::kLookahead:
        if ((MatchAt(pc + 1, cps, classes, pos, end) >= 0) != inst.negate) {
          pc = inst.x;
        } else {
          fail = true;
        }
        break;
      case Op::kEnd:
        if (pos == end) {
          ++pc;
        } else {
          fail = true;
        }
        break;
      case Op::kMatch:
        return static_cast<int64_t>(pos - start);
    }
    if (fail) {
      if (backtrack.empty()) return -1;
      std::tie(pc, pos) = backtrack.back();
      backtrack.pop_back();
    }
  }
}

void CodepointRegex::Split(const std::vector<uint32_t>& cps,
                           const std::vector<CodepointClass>& classes, size_t begin, size_t end,
                           std::vector<size_t>* word_ends) const {
  size_t done = begin;  // the end of the last word
  for (size_t pos = begin; pos < end;) {
    const int64_t n = MatchAt(0, cps, classes, pos, end);
    if (n <= 0) {
      ++pos;  // text between matches; an empty match is no word
      continue;
    }
    if (pos > done) word_ends->push_back(pos);
    pos += static_cast<size_t>(n);
    word_ends->push_back(pos);
    done = pos;
  }
  if (end > done) word_ends->push_back(end);
}

}  // namespace ctxpar::tokenizer_internal
