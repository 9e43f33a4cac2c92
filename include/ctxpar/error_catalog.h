// The error catalog: every error a configuration rule or a runtime check raises has one entry
// here, under a stable ID ("CTXPAR-DCP-003"), with its message template and the explanation a
// user needs (what it means, when it happens, solutions, an example fix, related IDs). The
// entries live in src/core/error_catalog.cpp (configuration) and error_catalog_runtime.cpp
// (files, processes, the CLI's input); `ctxpar explain` prints them.
//
// Message templates use `{name}` placeholders. Callers pass the values already formatted as
// Python would print them (ints plain, PyRepr() where SGLang's template says !r, PyTuple() for
// tuples), so rendered messages equal SGLang's texts byte for byte.
//
// Thread safety: the catalog is immutable; every function is safe from any thread.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar {

struct CatalogEntry {
  std::string_view id;
  std::string_view title;
  std::string_view message_template;
  StatusCode code;  // kInvalidArgument (configuration), kFailedPrecondition (runtime/platform),
                    // kInternal (a handler bug)
  std::string_view meaning;
  std::string_view when;
  std::vector<std::string_view> solutions;
  std::string_view before;                // an example command line that fails ...
  std::string_view after;                 // ... and the fixed one
  std::vector<std::string_view> related;  // other IDs
};

// Every entry, ordered by ID.
std::span<const CatalogEntry> ErrorCatalog();
// nullptr when `id` is not in the catalog (the match ignores case).
const CatalogEntry* FindCatalogEntry(std::string_view id);
// The placeholder names of a template, in order of appearance, without repeats.
std::vector<std::string> TemplatePlaceholders(std::string_view message_template);

struct CatalogArg {
  std::string_view name;
  std::string value;  // already formatted
};

// A Status with entry `id`'s code, its template rendered with `args`, and error_id() = id.
// An unknown ID, a missing or a surplus argument yields a kInternal Status describing the slip.
Status CatalogError(std::string_view id, std::span<const CatalogArg> args);
inline Status CatalogError(std::string_view id, std::initializer_list<CatalogArg> args) {
  return CatalogError(id, std::span<const CatalogArg>(args.begin(), args.size()));
}

// The longest message MatchCatalogMessage reads (1 MiB): a pasted error, or a log piped to
// `ctxpar explain --message -`, fits; anything longer is not matched, and the CLI refuses it
// (CTXPAR-EXPLAIN-001) before matching.
inline constexpr std::size_t kMaxCatalogMessageBytes = std::size_t{1} << 20;

// Which entry a pasted message (values filled in) came from. Runs of blanks count as one space.
// A template is its literal pieces with a placeholder between each two; a placeholder matches any
// text, the shortest that lets the rest of the template match (so each literal piece is found at
// its first occurrence). A whole-message match is preferred to a match inside a longer text
// (which starts at the first occurrence of the template's leading literal), then the template
// with the most literal text wins. Time is linear in the message's length (a few milliseconds per
// template for 1 MiB), whatever the message holds; a message longer than kMaxCatalogMessageBytes
// yields nullopt.
struct CatalogMatch {
  const CatalogEntry* entry;
  // Each placeholder once, in the template's order -> the text its first use matched.
  std::vector<std::pair<std::string, std::string>> values;
};
std::optional<CatalogMatch> MatchCatalogMessage(std::string_view message);

// Python's repr() of a str: 'a2a', "it's", with \n, \t, \\ and \xNN escapes.
std::string PyRepr(std::string_view text);
// Python's repr() of a tuple of str: ('none', 'deepep'); a 1-tuple is ('none',).
std::string PyTuple(std::span<const std::string_view> items);

}  // namespace ctxpar
